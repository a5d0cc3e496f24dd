#include "storage/tar_stream.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "common/scope_guard.h"

namespace bulkhead::storage {
namespace {

constexpr int kBlockBytes = 64 << 10;

using ArchiveWriter = std::unique_ptr<archive, decltype(&archive_write_free)>;
using DiskReader = std::unique_ptr<archive, decltype(&archive_read_free)>;
using Entry = std::unique_ptr<archive_entry, decltype(&archive_entry_free)>;
using LinkResolver = std::unique_ptr<archive_entry_linkresolver, decltype(&archive_entry_linkresolver_free)>;

// Carries the sink into libarchive's C callback and the sink's error back out.
struct SinkContext {
  const TarChunkSink* sink;
  Status status;
};

la_ssize_t WriteToSink(archive* writer, void* client_data, const void* buffer, size_t length) {
  auto* context = static_cast<SinkContext*>(client_data);
  if (!context->status.ok()) return -1;  // the sink failed before: nothing more goes out
  Status status;
  try {  // nothing may unwind through libarchive's C frames
    status = (*context->sink)(std::string_view(static_cast<const char*>(buffer), length));
  } catch (const std::exception& e) {
    status = MakeError(ErrorCode::kInternal, std::string("sending the tar stream: ") + e.what(), "tar_failed");
  }
  if (!status.ok()) {
    context->status = status;
    archive_set_error(writer, EIO, "%s", status.error().message.c_str());
    return -1;
  }
  return static_cast<la_ssize_t>(length);
}

std::string ArchiveMessage(archive* a) {
  const char* message = archive_error_string(a);
  return message != nullptr ? message : "unknown libarchive error";
}

Error TarError(const std::string& what, archive* a) {
  return MakeError(ErrorCode::kInternal, what + ": " + ArchiveMessage(a), "tar_failed");
}

// The sink's own error (a broken connection) explains more than libarchive's echo of it.
Error WriterError(const SinkContext& context, const std::string& what, archive* writer) {
  if (!context.status.ok()) return context.status.error();
  return TarError(what, writer);
}

// "<root>/etc/passwd" -> "./etc/passwd"; "<root>" -> "./".
std::string NameInArchive(const std::string& root, const std::string& path_on_disk) {
  std::string relative = path_on_disk.substr(std::min(root.size(), path_on_disk.size()));
  size_t start = relative.find_first_not_of('/');
  if (start == std::string::npos) return "./";
  return "./" + relative.substr(start);
}

// Copies the current file's data from `disk` into `writer`; holes become zeros.
Status CopyFileData(archive* disk, archive* writer, const SinkContext& context, const std::string& name) {
  static const std::vector<char> zeros(kBlockBytes, 0);
  const void* buffer = nullptr;
  size_t size = 0;
  la_int64_t offset = 0;
  la_int64_t written_up_to = 0;
  for (;;) {
    int r = archive_read_data_block(disk, &buffer, &size, &offset);
    if (r == ARCHIVE_EOF) return {};
    if (r != ARCHIVE_OK) return TarError("reading " + name, disk);
    while (written_up_to < offset) {
      size_t gap = static_cast<size_t>(std::min<la_int64_t>(offset - written_up_to, kBlockBytes));
      if (archive_write_data(writer, zeros.data(), gap) < 0) return WriterError(context, "writing " + name, writer);
      written_up_to += static_cast<la_int64_t>(gap);
    }
    if (size > 0 && archive_write_data(writer, buffer, size) < 0) {
      return WriterError(context, "writing " + name, writer);
    }
    written_up_to = offset + static_cast<la_int64_t>(size);
  }
}

Status StreamTree(std::string root, const TarChunkSink& sink, const TarWarningHandler& on_warning,
                  const std::function<void(archive_entry*)>& adjust,
                  const std::function<bool(const std::string&, bool)>& skip) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat root_info{};
  if (::stat(root.c_str(), &root_info) != 0) return SystemError(root, errno);
  if (!S_ISDIR(root_info.st_mode)) {
    return MakeError(ErrorCode::kBadRequest, root + " is not a directory", "not_a_directory");
  }

  SinkContext context{&sink, {}};  // outlives the writer, whose free may still call back
  ArchiveWriter writer(archive_write_new(), archive_write_free);
  DiskReader disk(archive_read_disk_new(), archive_read_free);
  Entry entry(archive_entry_new(), archive_entry_free);
  LinkResolver links(archive_entry_linkresolver_new(), archive_entry_linkresolver_free);
  if (!writer || !disk || !entry || !links) return MakeError(ErrorCode::kInternal, "out of memory", "tar_failed");
  // On any early return, free must not finish the archive: a truncated stream is the
  // honest result, not one that looks complete.
  ScopeGuard abandon_unless_finished([&writer] { archive_write_fail(writer.get()); });
  if (archive_write_set_format_pax(writer.get()) != ARCHIVE_OK ||
      // Names are bytes on Linux; keep them as they are whatever the locale.
      archive_write_set_options(writer.get(), "hdrcharset=BINARY") != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(writer.get(), kBlockBytes) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(writer.get(), 1) != ARCHIVE_OK ||
      archive_write_open(writer.get(), &context, nullptr, WriteToSink, nullptr) != ARCHIVE_OK) {
    return WriterError(context, "starting the tar stream", writer.get());
  }
  archive_entry_linkresolver_set_strategy(links.get(), archive_format(writer.get()));

  // Follow a symlink given as the root, never one inside it; stay on one filesystem. No
  // name lookups: owners travel as numbers, as they are inside the image.
  archive_read_disk_set_symlink_hybrid(disk.get());
  if (archive_read_disk_set_behavior(disk.get(), ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS |
                                                     ARCHIVE_READDISK_NO_SPARSE) != ARCHIVE_OK ||
      archive_read_disk_open(disk.get(), root.c_str()) != ARCHIVE_OK) {
    return TarError("opening " + root, disk.get());
  }

  for (;;) {
    archive_entry_clear(entry.get());
    int r = archive_read_next_header2(disk.get(), entry.get());
    if (r == ARCHIVE_EOF) break;
    if (r == ARCHIVE_FATAL) return TarError("reading " + root, disk.get());
    if (r == ARCHIVE_FAILED || r == ARCHIVE_RETRY) {
      on_warning("skipped: " + ArchiveMessage(disk.get()));
      continue;
    }
    if (r == ARCHIVE_WARN) on_warning(ArchiveMessage(disk.get()));
    std::string name = NameInArchive(root, archive_entry_pathname(entry.get()));
    if (skip && name.size() > 2 && skip(name.substr(2), archive_entry_filetype(entry.get()) == AE_IFDIR)) continue;
    if (archive_read_disk_can_descend(disk.get())) archive_read_disk_descend(disk.get());

    archive_entry_copy_pathname(entry.get(), name.c_str());
    if (adjust) adjust(entry.get());
    // Turns the second and later names of a file into hard links to the first.
    archive_entry* to_write = entry.get();
    archive_entry* deferred = nullptr;
    archive_entry_linkify(links.get(), &to_write, &deferred);
    if (to_write == nullptr) continue;  // not for tar formats, which never defer

    r = archive_write_header(writer.get(), to_write);
    if (r == ARCHIVE_FATAL) return WriterError(context, "writing the header of " + name, writer.get());
    if (r == ARCHIVE_FAILED) {  // e.g. a socket, which tar cannot hold
      on_warning("skipped " + name + ": " + ArchiveMessage(writer.get()));
      continue;
    }
    if (r == ARCHIVE_WARN) on_warning(name + ": " + ArchiveMessage(writer.get()));
    if (archive_entry_filetype(to_write) == AE_IFREG && archive_entry_size(to_write) > 0) {
      BH_TRY(CopyFileData(disk.get(), writer.get(), context, name));
    }
    if (archive_write_finish_entry(writer.get()) == ARCHIVE_FATAL) {
      return WriterError(context, "finishing " + name, writer.get());
    }
  }
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return WriterError(context, "finishing the tar stream", writer.get());
  }
  abandon_unless_finished.Dismiss();
  return {};
}

}  // namespace

Status StreamDirectoryAsTar(const std::string& root, const TarChunkSink& sink, const TarWarningHandler& on_warning,
                            const std::function<void(archive_entry*)>& adjust,
                            const std::function<bool(const std::string& path, bool is_dir)>& skip) {
  try {
    return StreamTree(root, sink, on_warning, adjust, skip);
  } catch (const std::exception& e) {  // allocation
    return MakeError(ErrorCode::kInternal, std::string("tar stream failed: ") + e.what(), "tar_failed");
  }
}

}  // namespace bulkhead::storage
