#include "storage/image_extract.h"

#include <fcntl.h>

#include <cerrno>

#include "common/unique_fd.h"
#include "storage/archive_util.h"
#include "storage/fs_util.h"

namespace bulkhead::storage {
namespace {

constexpr char kInvalidImage[] = "invalid_image";

constexpr int kExtractFlags = ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                              ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                              ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;

// A name stripped of leading "./" (so "./" and "." are the root, "" here) and of empty and "."
// components; nullopt for an absolute name or one with a ".." component.
std::optional<std::string> ContainedName(std::string name) {
  while (name.starts_with("./")) name.erase(0, 2);
  if (name.empty() || name == ".") return std::string();
  if (!IsContainedName(name)) return std::nullopt;
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (end > start && name.compare(start, end - start, ".") != 0) {
      if (!out.empty()) out += '/';
      out.append(name, start, end - start);
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

Error InvalidImage(const std::string& message) { return MakeError(ErrorCode::kInvalid, message, kInvalidImage); }

bool ImageArchiveEntry::is_special() const {
  const mode_t t = type();
  return hardlink.empty() && t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK;
}

Result<std::optional<ImageArchiveEntry>> ImageExtraction::Next() {
  for (;;) {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(reader_, &entry);
    if (rc == ARCHIVE_EOF) return std::optional<ImageArchiveEntry>();
    if (rc < ARCHIVE_WARN) return ArchiveError(reader_, "reading archive", kInvalidImage);
    const char* raw_name = archive_entry_pathname(entry);
    if (raw_name == nullptr) raw_name = archive_entry_pathname_utf8(entry);
    if (raw_name == nullptr) return InvalidImage("archive entry without a usable name");
    std::optional<std::string> name = ContainedName(raw_name);
    if (!name) return InvalidImage("archive entry escapes the image: " + std::string(raw_name));
    if (name->empty()) continue;  // the root itself
    ImageArchiveEntry e{entry, std::move(*name), {}};
    if (const char* hardlink = archive_entry_hardlink(entry)) {
      std::optional<std::string> target = ContainedName(hardlink);
      if (!target || target->empty()) {
        return InvalidImage("archive hard link escapes the image: " + e.name + " -> " + hardlink);
      }
      e.hardlink = std::move(*target);
    }
    return std::optional<ImageArchiveEntry>(std::move(e));
  }
}

Result<int64_t> ImageExtraction::Write(const ImageArchiveEntry& e) {
  archive_entry_copy_pathname(e.entry, e.name.c_str());
  if (!e.hardlink.empty()) archive_entry_copy_hardlink(e.entry, e.hardlink.c_str());
  archive_entry_set_uid(e.entry, StoredArchiveId(archive_entry_uid(e.entry)));
  archive_entry_set_gid(e.entry, StoredArchiveId(archive_entry_gid(e.entry)));
  if (archive_write_header(writer_, e.entry) < ARCHIVE_WARN) {
    return ArchiveError(writer_, "extracting " + e.name, kInvalidImage);
  }
  const int64_t size = archive_entry_size(e.entry);
  if (size > 0) BH_TRY(CopyEntryData(reader_, writer_, e.name, kInvalidImage));
  if (archive_write_finish_entry(writer_) < ARCHIVE_WARN) {
    return ArchiveError(writer_, "writing " + e.name, kInvalidImage);
  }
  return size > 0 ? size : 0;
}

Status ImageExtraction::Finish() {
  if (archive_write_close(writer_) != ARCHIVE_OK) {
    return ArchiveError(writer_, "finishing extraction", kInvalidImage);
  }
  return {};
}

Status ExtractImageArchive(const std::string& archive_path, const std::string& root_dir, ImageArchiveKind kind,
                           const std::function<Status(ImageExtraction&)>& extract) {
  UniqueFd root = OpenDirNoFollow(root_dir);
  if (!root) return SystemError("open " + root_dir, errno);

  ArchiveReader reader(archive_read_new());
  if (!reader) return MakeError(ErrorCode::kInternal, "archive_read_new failed");
  if (kind == ImageArchiveKind::kAnyArchive) {
    archive_read_support_filter_all(reader.get());
    archive_read_support_format_all(reader.get());
  } else {
    // What the OCI image spec and Docker's registries use, and no more: fewer decoders for
    // hostile bytes from a registry to reach.
    archive_read_support_filter_gzip(reader.get());
    archive_read_support_filter_zstd(reader.get());
    archive_read_support_format_tar(reader.get());
    archive_read_support_format_empty(reader.get());
  }
  if (archive_read_open_filename(reader.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    return ArchiveError(reader.get(), "opening " + archive_path, kInvalidImage);
  }
  // Chrooted into the tree: even a libarchive bug cannot write outside.
  return RunChrooted(root.get(), [&]() -> Status {
    ArchiveWriter writer(archive_write_disk_new());
    if (!writer) return MakeError(ErrorCode::kInternal, "archive_write_disk_new failed");
    // No name lookups: numeric owners from the archive, never the host's passwd.
    archive_write_disk_set_options(writer.get(), kExtractFlags);
    ImageExtraction extraction(reader.get(), writer.get());
    return extract(extraction);
  });
}

}  // namespace bulkhead::storage
