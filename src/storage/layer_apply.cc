#include "storage/layer_apply.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <map>
#include <set>
#include <vector>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/image_extract.h"

namespace bulkhead::storage {
namespace {

constexpr char kWhiteoutPrefix[] = ".wh.";
constexpr char kOpaqueMarker[] = ".wh..wh..opq";
// AUFS bookkeeping that layers Docker made on AUFS carry (.wh..wh.plnk/..., .wh..wh.aufs).
constexpr char kAufsMetaPrefix[] = ".wh..wh.";

std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

// The paths this layer wrote. Whiteouts and opaque markers apply to lower layers only: they
// spare these and the directories on the way to them, before or after them in the tar.
class WrittenPaths {
 public:
  void Add(const std::string& path) { paths_.insert(path); }
  // True when this layer wrote path or something below it.
  bool HoldsOrIs(const std::string& path) const {
    if (paths_.contains(path)) return true;
    // Everything below path sorts together from path + "/" on ("a/b-c" sorts before "a/b/").
    const std::string prefix = path + "/";
    auto it = paths_.lower_bound(prefix);
    return it != paths_.end() && it->starts_with(prefix);
  }

 private:
  std::set<std::string> paths_;
};

// The apply itself, in a thread chrooted into the tree (image_extract.h).
class LayerApplier {
 public:
  LayerApplier(ImageExtraction& extraction, int root_fd) : extraction_(extraction), root_fd_(root_fd) {}

  Status Run() {
    for (;;) {
      auto next = extraction_.Next();
      if (!next.ok()) return next.error();
      if (!next->has_value()) break;
      const ImageArchiveEntry& e = **next;
      const std::string dir = ParentOf(e.name);
      const std::string base = BaseOf(e.name);
      if (e.name != kOpaqueMarker && (e.name.starts_with(kAufsMetaPrefix) ||
                                      (base.starts_with(kAufsMetaPrefix) && base != kOpaqueMarker))) {
        continue;
      }
      if (base.starts_with(kWhiteoutPrefix)) {
        ++stats_.whiteouts;
        BH_TRY(Whiteout(e, dir, base));  // never written itself
        continue;
      }
      if (e.is_special()) {
        ++stats_.skipped_special;
        continue;
      }
      auto merged = MakeRoomFor(e, dir, base);
      if (!merged.ok()) return merged.error();
      auto bytes = extraction_.Write(e);
      if (!bytes.ok()) return bytes.error();
      if (*merged) NoteMergedDirTimes(e);
      written_.Add(e.name);
      ++stats_.entries;
      stats_.bytes += *bytes;
    }
    BH_TRY(extraction_.Finish());
    return SetMergedDirTimes();
  }

  const LayerApplyStats& stats() const { return stats_; }

 private:
  // DIR/.wh.NAME removes DIR/NAME; DIR/.wh..wh..opq empties DIR. Of lower layers' files only.
  Status Whiteout(const ImageArchiveEntry& e, const std::string& dir, const std::string& base) {
    const std::string target = base.substr(sizeof(kWhiteoutPrefix) - 1);
    const bool opaque = base == kOpaqueMarker;
    if (!opaque && (target.empty() || target == "." || target == "..")) {
      return InvalidImage("layer whiteout names no entry: " + e.name);
    }
    auto dir_fd = OpenDir(dir, e.name);
    if (!dir_fd.ok()) return dir_fd.error();
    if (!*dir_fd) return {};  // nothing there to remove
    std::vector<std::string> to_empty;
    if (opaque) {
      to_empty.push_back(dir);
    } else {
      BH_TRY(RemoveLower(dir_fd->get(), target, Join(dir, target), &to_empty));
    }
    return EmptyOfLower(std::move(to_empty), e);
  }

  // An entry replaces what lower layers (or earlier entries) left at its path, except that a
  // directory over a directory merges with it (libarchive then sets the new owner and mode).
  // True when it merges.
  Result<bool> MakeRoomFor(const ImageArchiveEntry& e, const std::string& dir, const std::string& base) {
    auto dir_fd = OpenDir(dir, e.name);
    if (!dir_fd.ok()) return dir_fd.error();
    if (!*dir_fd) return false;  // libarchive makes the missing directories
    struct stat st;
    if (::fstatat(dir_fd->get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return false;
      return SystemError("stat " + e.name, errno);
    }
    if (e.is_directory() && S_ISDIR(st.st_mode)) return true;
    BH_TRY(RemoveAt(dir_fd->get(), base, st));
    return false;
  }

  // libarchive defers the times of the directories it makes until their contents are in, not
  // of those it finds: a merged directory's are set at the end, as Docker sets them.
  void NoteMergedDirTimes(const ImageArchiveEntry& e) {
    if (!archive_entry_mtime_is_set(e.entry)) return;
    std::array<timespec, 2> times{timespec{0, UTIME_OMIT},
                                  timespec{archive_entry_mtime(e.entry), archive_entry_mtime_nsec(e.entry)}};
    if (archive_entry_atime_is_set(e.entry)) times[0] = {archive_entry_atime(e.entry), archive_entry_atime_nsec(e.entry)};
    merged_dir_times_[e.name] = times;
  }

  Status SetMergedDirTimes() {
    for (const auto& [name, times] : merged_dir_times_) {
      auto dir_fd = OpenDir(ParentOf(name), name);
      if (!dir_fd.ok()) return dir_fd.error();
      const std::string base = BaseOf(name);
      struct stat st;
      if (!*dir_fd || ::fstatat(dir_fd->get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
        continue;  // removed or replaced by a later entry
      }
      if (::utimensat(dir_fd->get(), base.c_str(), times.data(), AT_SYMLINK_NOFOLLOW) != 0) {
        return SystemError("set the times of " + name, errno);
      }
    }
    return {};
  }

  // The directory at path below the root, opened without following a symlink on the way: an
  // empty fd when some component is absent or not a directory (nothing there), kInvalid when one
  // is a symlink, which no entry may reach through (as libarchive's secure-symlink check says).
  Result<UniqueFd> OpenDir(const std::string& path, const std::string& entry_name) {
    UniqueFd dir(::openat(root_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return SystemError("open /", errno);
    for (size_t start = 0; start < path.size();) {
      size_t end = path.find('/', start);
      if (end == std::string::npos) end = path.size();
      const std::string part = path.substr(start, end - start);
      UniqueFd sub(::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) {
        const int err = errno;
        struct stat st;
        if (::fstatat(dir.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
          return InvalidImage("layer entry " + entry_name + " reaches through the symlink " + path.substr(0, end));
        }
        if (err == ENOENT || err == ENOTDIR) return UniqueFd();
        return SystemError("open " + path.substr(0, end), err);
      }
      dir = std::move(sub);
      start = end + 1;
    }
    return dir;
  }

  // Removes name in dir_fd (at path) unless this layer wrote it or something below it; a
  // directory it did write into goes on to_empty, to lose what lower layers put there.
  Status RemoveLower(int dir_fd, const std::string& name, const std::string& path, std::vector<std::string>* to_empty) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return errno == ENOENT ? Status() : SystemError("stat " + path, errno);
    }
    if (!written_.HoldsOrIs(path)) return RemoveAt(dir_fd, name, st);
    if (S_ISDIR(st.st_mode)) to_empty->push_back(path);
    return {};
  }

  // Empties each directory of to_empty of lower layers' files. A list, not recursion: two
  // descriptors open at a time however deep this layer wrote.
  Status EmptyOfLower(std::vector<std::string> to_empty, const ImageArchiveEntry& e) {
    while (!to_empty.empty()) {
      const std::string dir = std::move(to_empty.back());
      to_empty.pop_back();
      auto dir_fd = OpenDir(dir, e.name);
      if (!dir_fd.ok()) return dir_fd.error();
      if (!*dir_fd) continue;
      auto names = ListNames(dir_fd->get());
      if (!names.ok()) return names.error();
      for (const std::string& name : *names) BH_TRY(RemoveLower(dir_fd->get(), name, Join(dir, name), &to_empty));
    }
    return {};
  }

  // Removes name in dir_fd (st is its lstat), a directory with all below it, following no
  // symlink: fs_util's RemoveTree run with dir_fd as the working directory (this thread's own,
  // RunChrooted unshared it), which goes back to the root after, where libarchive wants it.
  Status RemoveAt(int dir_fd, const std::string& name, const struct stat& st) {
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) return SystemError("unlink " + name, errno);
      return {};
    }
    if (::fchdir(dir_fd) != 0) return SystemError("chdir", errno);
    Status removed = RemoveTree(name);
    if (::fchdir(root_fd_) != 0) return SystemError("chdir /", errno);
    return removed;
  }

  ImageExtraction& extraction_;
  const int root_fd_;
  WrittenPaths written_;
  std::map<std::string, std::array<timespec, 2>> merged_dir_times_;
  LayerApplyStats stats_;
};

}  // namespace

Result<LayerApplyStats> ApplyLayer(const std::string& blob_path, const std::string& rootfs_dir) {
  LayerApplyStats stats;
  BH_TRY(ExtractImageArchive(blob_path, rootfs_dir, ImageArchiveKind::kLayerTar, [&](ImageExtraction& x) -> Status {
    UniqueFd root(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));  // the tree: chrooted
    if (!root) return SystemError("open /", errno);
    LayerApplier applier(x, root.get());
    BH_TRY(applier.Run());
    stats = applier.stats();
    return {};
  }));
  return stats;
}

}  // namespace bulkhead::storage
