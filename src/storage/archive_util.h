// libarchive handles as RAII owners, and its errors as project Errors.
#pragma once
#include <archive.h>
#include <archive_entry.h>

#include <cerrno>
#include <memory>
#include <string>

#include "common/id_ranges.h"
#include "common/result.h"

namespace bulkhead::storage {

struct ArchiveReaderDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct ArchiveWriterDeleter {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ArchiveEntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using ArchiveReader = std::unique_ptr<archive, ArchiveReaderDeleter>;
using ArchiveWriter = std::unique_ptr<archive, ArchiveWriterDeleter>;
using ArchiveEntry = std::unique_ptr<archive_entry, ArchiveEntryDeleter>;

// kDiskFull when libarchive failed for lack of space, else kInvalid with detail_code: what
// goes wrong while unpacking is the archive's fault.
inline Error ArchiveError(archive* a, const std::string& what, const std::string& detail_code) {
  int err = archive_errno(a);
  const char* msg = archive_error_string(a);
  std::string text = what + ": " + (msg ? msg : "unknown libarchive error");
  if (err == ENOSPC || err == EDQUOT) return MakeError(ErrorCode::kDiskFull, text);
  return MakeError(ErrorCode::kInvalid, text, detail_code);
}

// An archive's owner as an image stores it: in the stored range (common/id_ranges.h), so that
// no file of an image is owned by a host account; ids a sandbox cannot have become its nobody.
inline la_int64_t StoredArchiveId(la_int64_t id) {
  return kStoredIdBase + (id >= 0 && id < static_cast<la_int64_t>(kIdCount) ? id : kNobodyId);
}

// Copies the current entry's data from reader to writer block by block (sparse files stay
// sparse), in bounded memory. `name` is for errors. A disk writer answers a failed write(2),
// ENOSPC included, with ARCHIVE_WARN, so anything but ARCHIVE_OK is a failure here.
inline Status CopyEntryData(archive* reader, archive* writer, const std::string& name, const std::string& detail_code) {
  const void* block;
  size_t size;
  la_int64_t offset;
  for (;;) {
    int rc = archive_read_data_block(reader, &block, &size, &offset);
    if (rc == ARCHIVE_EOF) return {};
    if (rc < ARCHIVE_WARN) return ArchiveError(reader, "reading " + name, detail_code);
    if (archive_write_data_block(writer, block, size, offset) != ARCHIVE_OK) {
      return ArchiveError(writer, "writing " + name, detail_code);
    }
  }
}

}  // namespace bulkhead::storage
