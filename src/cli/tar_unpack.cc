#include "cli/tar_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "common/scope_guard.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

using ArchiveReader = std::unique_ptr<archive, decltype(&archive_read_free)>;
using DiskWriter = std::unique_ptr<archive, decltype(&archive_write_free)>;

// What goes onto the disk: times and permission bits, never owners, ACLs, xattrs or file
// flags (a security.capability xattr from a sandbox must not reach the host). libarchive's
// own guards back ours: no "..", no absolute names, no extraction through symlinks (a
// symlink as the last component is replaced, not followed).
constexpr int kExtractFlags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                              ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;

// Carries the source into libarchive's C callback and the source's error back out.
struct SourceContext {
  const TarChunkSource* source;
  Status status;
};

la_ssize_t ReadFromSource(archive* reader, void* client_data, const void** buffer) {
  auto* context = static_cast<SourceContext*>(client_data);
  Result<std::string_view> piece = std::string_view();
  try {  // nothing may unwind through libarchive's C frames
    piece = (*context->source)();
  } catch (const std::exception& e) {
    piece = MakeError(ErrorCode::kInternal, std::string("reading the tar stream: ") + e.what(), "tar_failed");
  }
  if (!piece.ok()) {
    context->status = piece.error();
    archive_set_error(reader, EIO, "%s", piece.error().message.c_str());
    return -1;
  }
  *buffer = piece->data();
  return static_cast<la_ssize_t>(piece->size());
}

std::string ArchiveMessage(archive* a) {
  const char* message = archive_error_string(a);
  return message != nullptr ? message : "unknown libarchive error";
}

Error TarError(const std::string& what, archive* a) {
  return MakeError(ErrorCode::kInternal, what + ": " + ArchiveMessage(a), "tar_failed");
}

// The source's own error (a broken connection) explains more than libarchive's echo of it.
Error ReaderError(const SourceContext& context, const std::string& what, archive* reader) {
  if (!context.status.ok()) return context.status.error();
  return TarError(what, reader);
}

Error Refused(const std::string& name, const std::string& why) {
  return MakeError(ErrorCode::kForbidden, "refusing tar entry '" + name + "': " + why, "unsafe_entry");
}

Status CopyData(archive* reader, archive* writer, const SourceContext& context, const std::string& name) {
  const void* buffer = nullptr;
  size_t size = 0;
  la_int64_t offset = 0;
  for (;;) {
    int r = archive_read_data_block(reader, &buffer, &size, &offset);
    if (r == ARCHIVE_EOF) return {};
    if (r != ARCHIVE_OK) return ReaderError(context, "reading " + name, reader);
    if (archive_write_data_block(writer, buffer, size, offset) < ARCHIVE_OK) {
      return TarError("writing " + name, writer);
    }
  }
}

Status Unpack(const TarChunkSource& source, const std::string& directory, const TarWarningHandler& on_warning) {
  // libarchive works relative to the current directory: the destination's own path may
  // hold symlinks (the user chose it), only the names below it are checked.
  UniqueFd previous_cwd(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!previous_cwd) return SystemError("opening the current directory", errno);
  UniqueFd target(::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!target) return SystemError(directory, errno);
  if (::fchdir(target.get()) != 0) return SystemError("entering " + directory, errno);
  ScopeGuard return_to_cwd([&previous_cwd] { (void)!::fchdir(previous_cwd.get()); });

  SourceContext context{&source, {}};
  ArchiveReader reader(archive_read_new(), archive_read_free);
  DiskWriter writer(archive_write_disk_new(), archive_write_free);
  if (!reader || !writer) return MakeError(ErrorCode::kInternal, "out of memory", "tar_failed");
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());
  archive_read_support_format_empty(reader.get());
  if (archive_write_disk_set_options(writer.get(), kExtractFlags) != ARCHIVE_OK) {
    return TarError("setting up extraction", writer.get());
  }
  if (archive_read_open(reader.get(), &context, nullptr, ReadFromSource, nullptr) != ARCHIVE_OK) {
    return ReaderError(context, "reading the tar stream", reader.get());
  }

  archive_entry* entry = nullptr;
  for (;;) {
    int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r == ARCHIVE_WARN) on_warning(ArchiveMessage(reader.get()));
    if (r < ARCHIVE_WARN) return ReaderError(context, "reading the tar stream", reader.get());

    const char* raw_name = archive_entry_pathname(entry);
    std::string name = raw_name != nullptr ? raw_name : "";
    if (!IsContainedTarName(name)) return Refused(name, "it points outside the destination");
    if (const char* link = archive_entry_hardlink(entry); link != nullptr && !IsContainedTarName(link)) {
      return Refused(name, std::string("a hard link to '") + link + "' outside the destination");
    }
    mode_t type = archive_entry_filetype(entry);
    if (type == AE_IFCHR || type == AE_IFBLK) {
      on_warning("skipped device node " + name);
      continue;
    }
    // Files from a sandbox never become setuid/setgid programs here.
    archive_entry_set_perm(entry, archive_entry_perm(entry) & 01777);

    r = archive_write_header(writer.get(), entry);
    if (r == ARCHIVE_FATAL) return TarError("unpacking " + name, writer.get());
    if (r == ARCHIVE_FAILED) return Refused(name, ArchiveMessage(writer.get()));
    if (r == ARCHIVE_WARN) on_warning(name + ": " + ArchiveMessage(writer.get()));
    if (archive_entry_size(entry) > 0) BH_TRY(CopyData(reader.get(), writer.get(), context, name));
    if (archive_write_finish_entry(writer.get()) < ARCHIVE_WARN) {
      return TarError("finishing " + name, writer.get());
    }
  }
  // Applies the directories' modes and times, deferred until their contents are in.
  if (archive_write_close(writer.get()) != ARCHIVE_OK) return TarError("finishing the unpack", writer.get());
  return {};
}

}  // namespace

bool IsContainedTarName(std::string_view name) {
  if (name.empty() || name[0] == '/') return false;
  while (!name.empty()) {
    size_t slash = name.find('/');
    std::string_view component = name.substr(0, slash);
    if (component == "..") return false;
    if (slash == std::string_view::npos) break;
    name.remove_prefix(slash + 1);
  }
  return true;
}

Status UnpackTar(const TarChunkSource& source, const std::string& directory, const TarWarningHandler& on_warning) {
  try {
    return Unpack(source, directory, on_warning);
  } catch (const std::exception& e) {  // allocation
    return MakeError(ErrorCode::kInternal, std::string("unpacking failed: ") + e.what(), "tar_failed");
  }
}

}  // namespace bulkhead::cli
