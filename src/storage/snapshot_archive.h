// Portable snapshot archives: a sandbox's changed files (its overlayfs upper layer) as one
// zstd-compressed pax tar that another host imports under its own uid range.
//
// Layout, in this order:
//   bulkhead-snapshot.json   {"format":"bulkhead-snapshot","version":1,"metadata":{...}}
//   rootfs/...               the tree; owners relative to the sandbox's uid base (0..65535),
//                            numeric only; xattrs, whiteouts (char 0:0), hard links, sparse
//                            files, symlinks (as links, never followed), fifos, set-id bits
//   bulkhead-snapshot.end    {"entries":N}: the number of rootfs/ entries, so that a stream
//                            cut at any point (even between entries) is refused
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

inline constexpr int kSnapshotFormatVersion = 1;

// Writes dir (a snapshot tree written by an untrusted sandbox) as a snapshot archive to out_fd,
// streaming: out_fd may be a pipe or a socket, memory stays bounded. Owners in
// [uid_base, uid_base + 65536) are written relative to uid_base, others as 65534 (nobody).
// Everything is opened relative to a directory fd with O_NOFOLLOW, so neither a symlink nor a
// rename race makes the export read a file outside dir. Sockets, device nodes other than
// whiteouts, and xattrs other than user.*, security.capability, trusted.overlay.opaque and
// trusted.overlay.redirect are left out. metadata_json must be a JSON value (at most 1 MiB).
// kInvalid for bad metadata, kInternal for a read or write failure (e.g. the reader went away).
Status ExportSnapshotTree(const std::string& dir, uid_t uid_base, const std::string& metadata_json, int out_fd);

// Reads a snapshot archive from in_fd (streaming) into dest_dir, which must not exist or be an
// empty directory, with owners shifted to uid_base + canonical owner, and answers the metadata
// JSON that the export was given. The extraction runs chrooted into dest_dir and refuses
// absolute names, "..", entries through symlinks, hard links leaving the tree, device nodes
// other than whiteouts, owners beyond 65535 and xattrs other than user.*, security.capability
// and trusted.overlay.*. kInvalid (detail "invalid_snapshot") for any bad, hostile, truncated or
// non-zstd input, kTooLarge when the content exceeds max_bytes (file data plus 512 bytes per
// entry), kDiskFull when out of space. On any failure dest_dir is removed.
Result<std::string> ImportSnapshotTree(int in_fd, const std::string& dest_dir, uid_t uid_base, int64_t max_bytes);

}  // namespace bulkhead::storage
