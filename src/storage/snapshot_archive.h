// Portable snapshot archives: a sandbox's changed files (its overlayfs upper layer) as one
// zstd-compressed pax tar that another host imports under its own uid range.
//
// Layout, in this order:
//   bulkhead-snapshot.json   {"format":"bulkhead-snapshot","version":1,"metadata":{...}}
//   rootfs/...               the tree; owners relative to the sandbox's uid base (0..65535),
//                            numeric only; xattrs, whiteouts (char 0:0), hard links, sparse
//                            files, symlinks (as links, never followed), fifos, set-id bits
//   memory/NAME              (version 2 only) the files of a tier's memory image, owned by
//                            root, sparse
//   bulkhead-snapshot.end    {"entries":N}: the number of rootfs/ entries, so that a stream
//                            cut at any point (even between entries) is refused; in version 2
//                            also "memory": {"files":[{"name","size","digest"}], "mac"}
//
// A memory image is restored by feeding it to the tier (runsc's Sentry, QEMU), which trusts
// it as its own. So the end of a version 2 archive carries an HMAC-SHA256, under the exporting
// daemon's memory image key, of the description and of each memory file's name, size and
// digest (MemoryImageManifest); a host takes the image only if its own key gives the same.
// The files under rootfs/ are checked as in any import, whoever made them.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

inline constexpr int kSnapshotFormatVersion = 1;        // files only
inline constexpr int kMemorySnapshotFormatVersion = 2;  // files and a memory image

// A tier's memory image to export with the files: the regular files of `dir` (written by this
// host's tier), vouched for with `key`.
struct MemoryExport {
  std::string dir;
  std::string key;
};

// Where an archive's memory image goes, if it has one: into `dir` (an empty directory of
// root's), taken only if it is vouched for with `key`. `accept` sees the archive's metadata
// before anything is extracted and may refuse it (e.g. an image this host's tier cannot run);
// it runs chrooted into the new tree, so it must not look at paths.
struct MemoryImport {
  std::string dir;
  std::string key;
  std::function<Status(const std::string& metadata_json)> accept;
};

struct ImportedSnapshot {
  std::string metadata;  // the JSON the export was given
  bool memory = false;   // a memory image was taken into MemoryImport::dir
};

// Writes dir (a snapshot tree written by an untrusted sandbox) as a snapshot archive to out_fd,
// streaming: out_fd may be a pipe or a socket, memory stays bounded. Owners in
// [uid_base, uid_base + 65536) are written relative to uid_base, others as 65534 (nobody).
// Everything is opened relative to a directory fd with O_NOFOLLOW, so neither a symlink nor a
// rename race makes the export read a file outside dir. Sockets, device nodes other than
// whiteouts, and xattrs other than user.*, security.capability, trusted.overlay.opaque and
// trusted.overlay.redirect are left out. metadata_json must be a JSON value (at most 1 MiB).
// With `memory`, the archive is of version 2 and carries that image.
// kInvalid for bad metadata, kInternal for a read or write failure (e.g. the reader went away).
Status ExportSnapshotTree(const std::string& dir, uid_t uid_base, const std::string& metadata_json, int out_fd,
                          const MemoryExport* memory = nullptr);

// Reads a snapshot archive from in_fd (streaming) into dest_dir, which must not exist or be an
// empty directory, with owners shifted to uid_base + canonical owner, and answers the metadata
// JSON that the export was given. The extraction runs chrooted into dest_dir and refuses
// absolute names, "..", entries through symlinks, hard links leaving the tree, device nodes
// other than whiteouts, owners beyond 65535 and xattrs other than user.*, security.capability
// and trusted.overlay.*. kInvalid (detail "invalid_snapshot") for any bad, hostile, truncated or
// non-zstd input, kTooLarge when the content exceeds max_bytes (file data plus 512 bytes per
// entry, memory images' data included), kDiskFull when out of space. A memory image is taken
// only with `memory` (else its files are skipped); one not vouched for with its key is kInvalid
// (detail "memory_image_untrusted"). On any failure dest_dir is removed and memory->dir emptied.
Result<ImportedSnapshot> ImportSnapshotTree(int in_fd, const std::string& dest_dir, uid_t uid_base,
                                            int64_t max_bytes, const MemoryImport* memory = nullptr);

}  // namespace bulkhead::storage
