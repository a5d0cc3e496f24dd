#include "cli/tar_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <unordered_set>

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

std::string JoinedName(const std::vector<std::string_view>& parts) {
  std::string joined;
  for (std::string_view part : parts) {
    if (!joined.empty()) joined += '/';
    joined += part;
  }
  return joined;
}

// Why an entry may not be unpacked, or nullopt. `regular_files`: the names of the regular
// files unpacked so far, the only things a hard link may name (anything else could be a
// file outside, or a symlink that means something else in the link's directory).
std::optional<std::string> WhyRefused(archive_entry* entry, const std::optional<std::vector<std::string_view>>& parts,
                                      const std::unordered_set<std::string>& regular_files) {
  if (!parts) return "its name leads outside the destination";
  const char* hardlink = archive_entry_hardlink(entry);
  mode_t type = archive_entry_filetype(entry);
  if (parts->empty() && (hardlink != nullptr || type != AE_IFDIR)) return "it would replace the destination itself";
  if (hardlink != nullptr) {
    auto target = ContainedTarName(hardlink);
    if (target && regular_files.contains(JoinedName(*target))) return std::nullopt;
    return std::string("a hard link to '") + hardlink + "', which is not a file unpacked before it";
  }
  switch (type) {
    case AE_IFREG:
    case AE_IFDIR:
      return std::nullopt;
    case AE_IFLNK: {
      const char* target = archive_entry_symlink(entry);
      if (target != nullptr && SymlinkStaysInside(*parts, target)) return std::nullopt;
      return std::string("a symlink to '") + (target != nullptr ? target : "") + "', outside the destination";
    }
    case AE_IFCHR:
    case AE_IFBLK:
      return "a device node";
    case AE_IFIFO:
      return "a fifo";
    default:
      return "an entry of an unknown type";
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

  std::unordered_set<std::string> regular_files;
  size_t refused = 0;
  std::string first_refusal;
  // A refused entry is skipped (libarchive skips its data at the next header): the rest of
  // the tree still arrives, and the unpack fails at the end.
  auto refuse = [&](const std::string& name, const std::string& why) {
    std::string what = "'" + name + "': " + why;
    on_warning("refused tar entry " + what);
    if (refused++ == 0) first_refusal = what;
  };
  archive_entry* entry = nullptr;
  for (;;) {
    int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r == ARCHIVE_WARN) on_warning(ArchiveMessage(reader.get()));
    if (r < ARCHIVE_WARN) return ReaderError(context, "reading the tar stream", reader.get());

    const char* raw_name = archive_entry_pathname(entry);
    std::string name = raw_name != nullptr ? raw_name : "";
    auto parts = ContainedTarName(name);
    if (auto why = WhyRefused(entry, parts, regular_files)) {
      refuse(name, *why);
      continue;
    }
    std::string key = JoinedName(*parts);
    regular_files.erase(key);  // what was there is replaced (or, should this fail, may be gone)
    mode_t type = archive_entry_filetype(entry);
    archive_entry_set_perm(entry, HostPermissions(archive_entry_perm(entry), type == AE_IFDIR));

    r = archive_write_header(writer.get(), entry);
    if (r == ARCHIVE_FATAL) return TarError("unpacking " + name, writer.get());
    if (r == ARCHIVE_FAILED) {
      refuse(name, ArchiveMessage(writer.get()));
      continue;
    }
    if (r == ARCHIVE_WARN) on_warning(name + ": " + ArchiveMessage(writer.get()));
    if (archive_entry_size(entry) > 0) BH_TRY(CopyData(reader.get(), writer.get(), context, name));
    if (archive_write_finish_entry(writer.get()) < ARCHIVE_WARN) {
      return TarError("finishing " + name, writer.get());
    }
    if (type == AE_IFREG) regular_files.insert(std::move(key));
  }
  // Applies the directories' modes and times, deferred until their contents are in.
  if (archive_write_close(writer.get()) != ARCHIVE_OK) return TarError("finishing the unpack", writer.get());
  if (refused > 0) {
    return MakeError(ErrorCode::kForbidden,
                     std::to_string(refused) + " unsafe tar entr" + (refused == 1 ? "y" : "ies") +
                         " refused, the rest is unpacked; the first: " + first_refusal,
                     "unsafe_entry");
  }
  return {};
}

}  // namespace

mode_t HostPermissions(mode_t mode, bool is_directory) { return mode & (is_directory ? 01777 : 0777); }

std::optional<std::vector<std::string_view>> ContainedTarName(std::string_view name) {
  if (name.empty() || name[0] == '/') return std::nullopt;
  std::vector<std::string_view> parts;
  for (size_t start = 0; start <= name.size();) {
    size_t slash = std::min(name.find('/', start), name.size());
    std::string_view part = name.substr(start, slash - start);
    if (part == "..") return std::nullopt;
    if (!part.empty() && part != ".") parts.push_back(part);
    start = slash + 1;
  }
  return parts;
}

bool SymlinkStaysInside(const std::vector<std::string_view>& name_parts, std::string_view target) {
  if (target.empty() || target[0] == '/' || name_parts.empty()) return false;
  size_t depth = name_parts.size() - 1;  // the directories between the destination and the link
  bool named = false;
  for (size_t start = 0; start <= target.size();) {
    size_t slash = std::min(target.find('/', start), target.size());
    std::string_view part = target.substr(start, slash - start);
    if (part == "..") {
      if (named || depth == 0) return false;
      --depth;
    } else if (!part.empty() && part != ".") {
      named = true;
    }
    start = slash + 1;
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
