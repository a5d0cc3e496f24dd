#include "storage/layer_apply.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "common/unique_fd.h"
#include "storage/archive_util.h"
#include "storage/fs_util.h"

namespace bulkhead::storage {
namespace {

// No ARCHIVE_EXTRACT_SECURE_SYMLINKS, unlike an import: layers legitimately write through the
// symlinks of lower layers (lib -> usr/lib), and the chroot keeps every such path inside.
constexpr int kExtractFlags = ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                              ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;
constexpr char kWhiteoutPrefix[] = ".wh.";
constexpr char kOpaqueMarker[] = ".wh..wh..opq";

Error Hostile(const std::string& what) { return MakeError(ErrorCode::kInvalid, what, "invalid_image"); }

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "a/b/", "./a//b" -> "a/b"; "" for the root itself.
std::string Normalize(std::string name) {
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = end + 1;
  }
  return out;
}

// Removes whatever is at `path` (a directory with all under it). Absent is fine.
Status RemovePath(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? Status() : SystemError("stat " + path, errno);
  if (S_ISDIR(st.st_mode)) return RemoveTree(path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return SystemError("unlink " + path, errno);
  return {};
}

// The paths this layer wrote: an opaque directory keeps them (and what is under them).
class WrittenPaths {
 public:
  void Add(const std::string& path) { paths_.insert(path); }
  bool CoversOrHolds(const std::string& path) const {
    auto it = paths_.lower_bound(path);
    return it != paths_.end() && (*it == path || it->starts_with(path + "/"));
  }

 private:
  std::set<std::string> paths_;
};

Status MakeOpaque(const std::string& dir, const WrittenPaths& written) {
  const std::string path = dir.empty() ? "." : dir;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
  std::vector<std::string> doomed;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string child = dir.empty() ? name : dir + "/" + name;
      if (!written.CoversOrHolds(child)) doomed.push_back(child);
    }
    ::closedir(d);
  }
  for (const std::string& child : doomed) BH_TRY(RemovePath(child));
  return {};
}

// Makes room for an entry: a lower layer's directory goes when a non-directory replaces it,
// and any non-directory goes (a hard link cannot be made over an existing name).
Status ClearFor(const std::string& name, bool is_dir) {
  struct stat st;
  if (::lstat(name.c_str(), &st) != 0) return {};
  if (is_dir && S_ISDIR(st.st_mode)) return {};  // merged: lower contents stay
  return RemovePath(name);
}

// The apply itself; runs in a thread whose root and cwd are the rootfs.
Result<LayerApplyStats> ApplyHere(archive* reader) {
  ArchiveWriter writer(archive_write_disk_new());
  if (!writer) return MakeError(ErrorCode::kInternal, "archive_write_disk_new failed");
  archive_write_disk_set_options(writer.get(), kExtractFlags);
  LayerApplyStats stats;
  WrittenPaths written;
  for (;;) {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(reader, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) return ArchiveError(reader, "reading the layer", "invalid_image");
    const char* raw_name = archive_entry_pathname(entry);
    if (raw_name == nullptr) raw_name = archive_entry_pathname_utf8(entry);
    if (raw_name == nullptr) return Hostile("layer entry without a usable name");
    if (raw_name[0] == '/') return Hostile(std::string("layer entry with an absolute name: ") + raw_name);
    const std::string name = Normalize(raw_name);
    if (name.empty()) continue;  // the root itself
    if (!IsContainedName(name)) return Hostile("layer entry escapes the image: " + name);

    const std::string base = BaseName(name);
    if (base.starts_with(kWhiteoutPrefix)) {
      ++stats.whiteouts;
      const std::string dir = DirName(name) == "." ? "" : DirName(name);
      if (base == kOpaqueMarker) {
        BH_TRY(MakeOpaque(dir, written));
        continue;
      }
      const std::string target = base.substr(sizeof(kWhiteoutPrefix) - 1);
      if (target.empty() || target == "." || target == "..") return Hostile("layer has a bad whiteout: " + name);
      BH_TRY(RemovePath(dir.empty() ? target : dir + "/" + target));
      continue;
    }

    const char* hardlink = archive_entry_hardlink(entry);
    std::string link_target;
    if (hardlink != nullptr) {
      if (hardlink[0] == '/') return Hostile("layer hard link points out of the image: " + std::string(hardlink));
      link_target = Normalize(hardlink);
      if (link_target.empty() || !IsContainedName(link_target)) {
        return Hostile("layer hard link points out of the image: " + std::string(hardlink));
      }
      archive_entry_copy_hardlink(entry, link_target.c_str());
    }
    const mode_t type = archive_entry_filetype(entry);
    if (hardlink == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      ++stats.skipped_special;
      continue;
    }
    BH_TRY(ClearFor(name, hardlink == nullptr && type == AE_IFDIR));
    archive_entry_copy_pathname(entry, name.c_str());
    archive_entry_set_uid(entry, StoredArchiveId(archive_entry_uid(entry)));
    archive_entry_set_gid(entry, StoredArchiveId(archive_entry_gid(entry)));
    rc = archive_write_header(writer.get(), entry);
    if (rc < ARCHIVE_WARN) return ArchiveError(writer.get(), "writing " + name, "invalid_image");
    if (archive_entry_size(entry) > 0) BH_TRY(CopyEntryData(reader, writer.get(), name, "invalid_image"));
    if (archive_write_finish_entry(writer.get()) < ARCHIVE_WARN) {
      return ArchiveError(writer.get(), "writing " + name, "invalid_image");
    }
    written.Add(name);
    ++stats.entries;
  }
  // Applies the directory modes and times deferred until their contents were in.
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return ArchiveError(writer.get(), "finishing the layer", "invalid_image");
  }
  return stats;
}

}  // namespace

Result<LayerApplyStats> ApplyLayer(const std::string& blob_path, const std::string& rootfs_dir) {
  UniqueFd root = OpenDirNoFollow(rootfs_dir);
  if (!root) return SystemError("open " + rootfs_dir, errno);
  ArchiveReader reader(archive_read_new());
  if (!reader) return MakeError(ErrorCode::kInternal, "archive_read_new failed");
  archive_read_support_filter_gzip(reader.get());
  archive_read_support_filter_zstd(reader.get());
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_filename(reader.get(), blob_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    return ArchiveError(reader.get(), "opening the layer", "invalid_image");
  }
  Result<LayerApplyStats> result = LayerApplyStats{};
  // Chrooted into the rootfs: no name, link or symlink can take a write outside.
  Status ran = RunChrooted(root.get(), [&]() -> Status {
    result = ApplyHere(reader.get());
    return result.ok() ? Status() : Status(result.error());
  });
  if (!ran.ok()) return ran.error();
  return result;
}

}  // namespace bulkhead::storage
