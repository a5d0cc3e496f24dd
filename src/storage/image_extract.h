// Extracting an archive into an image's tree: what an imported rootfs tarball and a pulled
// layer share. The entries are written by a thread chrooted into the tree (fs_util.h
// RunChrooted) with libarchive's secure-symlink/no-dotdot/no-absolute checks, and their owners
// moved into the stored id range (archive_util.h StoredArchiveId), so no entry lands outside the
// tree and no file is a host account's.
#pragma once
#include <archive.h>
#include <archive_entry.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

// What an archive may be.
enum class ImageArchiveKind {
  kAnyArchive,  // any format and compression libarchive reads: an imported rootfs tarball
  kLayerTar,    // a tar, plain, gzip or zstd: an OCI/Docker image layer
};

// kInvalid with detail_code "invalid_image": what is wrong with an image archive.
Error InvalidImage(const std::string& message);

// One entry as read, its names checked: relative, normalized ("./a//b/" -> "a/b"), no "..".
struct ImageArchiveEntry {
  archive_entry* entry = nullptr;  // the reader's, valid until the next entry is read
  std::string name;                // never empty: the root's own entry is not handed out
  std::string hardlink;            // a hard link's target, else empty

  mode_t type() const { return archive_entry_filetype(entry); }
  bool is_directory() const { return hardlink.empty() && type() == AE_IFDIR; }
  // Device nodes, fifos, sockets: never extracted (the runtime makes /dev).
  bool is_special() const;
};

// The extraction, inside the chroot: the archive's entries one by one, and the disk writer.
class ImageExtraction {
 public:
  ImageExtraction(archive* reader, archive* writer) : reader_(reader), writer_(writer) {}

  // The next entry, nullopt at the end. kInvalid for an unreadable archive, an entry without a
  // usable name, or an absolute or ".." name or hard link target (naming the entry).
  Result<std::optional<ImageArchiveEntry>> Next();
  // Writes the entry (the last Next gave) at its name with owners moved into the stored range,
  // its data streamed block by block; the data's size. kDiskFull when out of space.
  Result<int64_t> Write(const ImageArchiveEntry& e);
  // Applies the directory modes and times deferred until the directories' contents were in.
  Status Finish();

 private:
  archive* reader_;
  archive* writer_;
};

// Opens the archive at archive_path, then runs `extract` in a thread whose root and working
// directory are root_dir (an existing directory, not a symlink).
Status ExtractImageArchive(const std::string& archive_path, const std::string& root_dir, ImageArchiveKind kind,
                           const std::function<Status(ImageExtraction&)>& extract);

}  // namespace bulkhead::storage
