// libarchive handles as RAII owners, and its errors as project Errors.
#pragma once
#include <archive.h>
#include <archive_entry.h>

#include <cerrno>
#include <memory>
#include <string>

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

}  // namespace bulkhead::storage
