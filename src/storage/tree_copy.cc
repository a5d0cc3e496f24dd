#include "storage/tree_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "storage/file_capability.h"
#include "storage/fs_util.h"

namespace bulkhead::storage {
namespace {

// Each level holds a descriptor on both sides; a sandbox can nest directories without end,
// so the walk stops (with an error) rather than run out of descriptors.
constexpr int kMaxDepth = 2000;

// The path of `name` inside an open directory: the l*xattr calls follow the /proc magic
// link to the directory but not `name` itself, so this is safe for symlinks too.
std::string EntryPath(int dir_fd, const std::string& name) {
  return "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name;
}

// A v3 file capability names the host uid that is root of the namespace it applies in:
// that uid moves with the owners.
void ShiftCapability(std::string& value, const IdShift& shift) {
  if (IsCapabilityV3(value)) value = CapabilityWithRoot(value, shift.Map(*CapabilityRoot(value)));
}

// 0 and the value in `out`, or the errno.
int GetXattr(const std::string& path, const char* name, std::string& out) {
  out.assign(256, '\0');
  for (;;) {
    ssize_t n = ::lgetxattr(path.c_str(), name, out.data(), out.size());
    if (n >= 0) {
      out.resize(static_cast<size_t>(n));
      return 0;
    }
    if (errno != ERANGE) return errno;
    n = ::lgetxattr(path.c_str(), name, nullptr, 0);
    if (n < 0) return errno;
    out.resize(static_cast<size_t>(n) + 1);
  }
}

Status CopyXattrs(const std::string& from, const std::string& to, const IdShift& shift) {
  ssize_t size = ::llistxattr(from.c_str(), nullptr, 0);
  if (size < 0) {
    if (errno == ENOTSUP) return {};
    return SystemError("listxattr", errno);
  }
  if (size == 0) return {};
  std::string names(static_cast<size_t>(size), '\0');
  size = ::llistxattr(from.c_str(), names.data(), names.size());
  if (size < 0) return SystemError("listxattr", errno);
  names.resize(static_cast<size_t>(size));
  for (size_t at = 0; at < names.size();) {
    const char* name = names.c_str() + at;
    at += std::strlen(name) + 1;
    std::string value;
    if (int err = GetXattr(from, name, value); err != 0) {
      if (err == ENODATA) continue;  // removed since the listing
      return SystemError(std::string("getxattr ") + name, err);
    }
    if (std::strcmp(name, kCapabilityXattr) == 0) ShiftCapability(value, shift);
    if (::lsetxattr(to.c_str(), name, value.data(), value.size(), 0) != 0) {
      return SystemError(std::string("setxattr ") + name, errno);
    }
  }
  return {};
}

Status SetTimes(int dir_fd, const std::string& name, const struct stat& st) {
  const timespec times[2] = {st.st_atim, st.st_mtim};
  if (::utimensat(dir_fd, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) return SystemError("utimensat " + name, errno);
  return {};
}

class TreeCopier {
 public:
  explicit TreeCopier(const IdShift& shift) : shift_(shift) {}

  Status CopyDir(int src_dir, int dst_dir, const std::string& rel, int depth) {
    if (depth > kMaxDepth) return MakeError(ErrorCode::kInvalid, "directories nested deeper than " + std::to_string(kMaxDepth));
    auto names = ListNames(src_dir);
    if (!names.ok()) return names.error();
    for (const auto& name : *names) {
      struct stat st;
      if (::fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return SystemError("stat " + rel + name, errno);
      BH_TRY(CopyEntry(src_dir, dst_dir, name, st, rel, depth));
    }
    return {};
  }

  // Finishes a directory after its contents: owner, xattrs, mode, then times (last, as
  // writing into it changed them).
  Status FinishDir(int src_parent, int dst_parent, const std::string& name, int dst_fd, const struct stat& st) {
    if (::fchown(dst_fd, shift_.Map(st.st_uid), shift_.Map(st.st_gid)) != 0) return SystemError("chown " + name, errno);
    BH_TRY(CopyXattrs(EntryPath(src_parent, name), EntryPath(dst_parent, name), shift_));
    if (::fchmod(dst_fd, st.st_mode & 07777) != 0) return SystemError("chmod " + name, errno);
    return SetTimes(dst_parent, name, st);
  }

  Status CopyRoot(const std::string& from, const std::string& to) {
    UniqueFd src(::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!src) return SystemError("open " + from, errno);
    struct stat st;
    if (::fstat(src.get(), &st) != 0) return SystemError("stat " + from, errno);
    if (::mkdir(to.c_str(), 0700) != 0) return SystemError("mkdir " + to, errno);
    UniqueFd dst(::open(to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dst) return SystemError("open " + to, errno);
    dst_root_ = dst.get();
    BH_TRY(CopyDir(src.get(), dst.get(), "", 0));
    if (::fchown(dst.get(), shift_.Map(st.st_uid), shift_.Map(st.st_gid)) != 0) return SystemError("chown " + to, errno);
    BH_TRY(CopyXattrs(EntryPath(src.get(), "."), EntryPath(dst.get(), "."), shift_));
    if (::fchmod(dst.get(), st.st_mode & 07777) != 0) return SystemError("chmod " + to, errno);
    const timespec times[2] = {st.st_atim, st.st_mtim};
    if (::futimens(dst.get(), times) != 0) return SystemError("utimens " + to, errno);
    return {};
  }

 private:
  Status CopyEntry(int src_dir, int dst_dir, const std::string& name, const struct stat& st, const std::string& rel,
                   int depth) {
    const std::string path = rel + name;
    if (S_ISDIR(st.st_mode)) {
      if (::mkdirat(dst_dir, name.c_str(), 0700) != 0) return SystemError("mkdir " + path, errno);
      UniqueFd src(::openat(src_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!src) return SystemError("open " + path, errno);
      UniqueFd dst(::openat(dst_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dst) return SystemError("open " + path, errno);
      BH_TRY(CopyDir(src.get(), dst.get(), path + "/", depth + 1));
      return FinishDir(src_dir, dst_dir, name, dst.get(), st);
    }
    // A second name of an inode already copied becomes a hard link to the copy.
    if (st.st_nlink > 1) {
      auto key = std::make_pair(st.st_dev, st.st_ino);
      if (auto it = links_.find(key); it != links_.end()) {
        if (::linkat(dst_root_, it->second.c_str(), dst_dir, name.c_str(), 0) != 0) return SystemError("link " + path, errno);
        return {};
      }
      links_.emplace(key, path);
    }
    if (S_ISREG(st.st_mode)) return CopyFile(src_dir, dst_dir, name, st, path);
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t n = ::readlinkat(src_dir, name.c_str(), target.data(), target.size());
      if (n < 0) return SystemError("readlink " + path, errno);
      target.resize(static_cast<size_t>(n));
      if (::symlinkat(target.c_str(), dst_dir, name.c_str()) != 0) return SystemError("symlink " + path, errno);
    } else {
      // Devices (an overlay whiteout is char 0:0), fifos and sockets.
      if (::mknodat(dst_dir, name.c_str(), (st.st_mode & S_IFMT) | 0600, st.st_rdev) != 0) {
        return SystemError("mknod " + path, errno);
      }
    }
    if (::fchownat(dst_dir, name.c_str(), shift_.Map(st.st_uid), shift_.Map(st.st_gid), AT_SYMLINK_NOFOLLOW) != 0) {
      return SystemError("chown " + path, errno);
    }
    BH_TRY(CopyXattrs(EntryPath(src_dir, name), EntryPath(dst_dir, name), shift_));
    if (!S_ISLNK(st.st_mode) && ::fchmodat(dst_dir, name.c_str(), st.st_mode & 07777, 0) != 0) {
      return SystemError("chmod " + path, errno);
    }
    return SetTimes(dst_dir, name, st);
  }

  Status CopyFile(int src_dir, int dst_dir, const std::string& name, const struct stat& st, const std::string& path) {
    UniqueFd src(::openat(src_dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
    if (!src) return SystemError("open " + path, errno);
    UniqueFd dst(::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!dst) return SystemError("create " + path, errno);
    BH_TRY(CopyData(src.get(), dst.get(), st.st_size, path));
    if (::fchown(dst.get(), shift_.Map(st.st_uid), shift_.Map(st.st_gid)) != 0) return SystemError("chown " + path, errno);
    BH_TRY(CopyXattrs(EntryPath(src_dir, name), EntryPath(dst_dir, name), shift_));
    if (::fchmod(dst.get(), st.st_mode & 07777) != 0) return SystemError("chmod " + path, errno);
    const timespec times[2] = {st.st_atim, st.st_mtim};
    if (::futimens(dst.get(), times) != 0) return SystemError("utimens " + path, errno);
    return {};
  }

  // A reflink where the filesystem shares extents (xfs reflink=1, btrfs); else the data
  // segments only, so holes stay holes.
  Status CopyData(int src, int dst, off_t size, const std::string& path) {
    if (size == 0) return {};
    if (clone_works_) {
      if (::ioctl(dst, FICLONE, src) == 0) return {};
      if (errno == ENOSPC || errno == EDQUOT) return SystemError("clone " + path, errno);
      clone_works_ = false;  // EOPNOTSUPP, EXDEV, EINVAL: the filesystem cannot; stop asking
    }
    off_t offset = 0;
    while (offset < size) {
      off_t data = ::lseek(src, offset, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;  // only a hole is left
        data = offset;             // no SEEK_DATA: copy everything
      }
      off_t hole = ::lseek(src, data, SEEK_HOLE);
      if (hole < 0) hole = size;
      BH_TRY(CopyRange(src, dst, data, std::min(hole, size) - data, path));
      offset = hole;
    }
    if (::ftruncate(dst, size) != 0) return SystemError("truncate " + path, errno);
    return {};
  }

  Status CopyRange(int src, int dst, off_t offset, off_t length, const std::string& path) {
    loff_t in = offset, out = offset;
    while (length > 0 && copy_range_works_) {
      ssize_t n = ::copy_file_range(src, &in, dst, &out, static_cast<size_t>(length), 0);
      if (n > 0) {
        length -= n;
        continue;
      }
      if (n == 0) return {};  // the file shrank meanwhile
      if (errno == EINTR) continue;
      if (errno == ENOSPC || errno == EDQUOT || errno == EIO) return SystemError("copy " + path, errno);
      copy_range_works_ = false;
    }
    char buf[128 * 1024];
    while (length > 0) {
      ssize_t n = ::pread(src, buf, std::min<off_t>(length, sizeof buf), in);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return SystemError("read " + path, errno);
      if (n == 0) return {};
      for (ssize_t done = 0; done < n;) {
        ssize_t w = ::pwrite(dst, buf + done, static_cast<size_t>(n - done), out);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return SystemError("write " + path, errno);
        done += w;
        out += w;
      }
      in += n;
      length -= n;
    }
    return {};
  }

  IdShift shift_;
  int dst_root_ = -1;
  bool clone_works_ = true;
  bool copy_range_works_ = true;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;  // inode -> its first copy, relative to the root
};

// chown clears set-id bits and file capabilities: both are put back.
Status ShiftEntry(int dir_fd, const std::string& name, const struct stat& st, const IdShift& shift) {
  uid_t uid = shift.Map(st.st_uid);
  gid_t gid = shift.Map(st.st_gid);
  if (uid == st.st_uid && gid == st.st_gid) return {};
  const std::string path = EntryPath(dir_fd, name);
  std::optional<std::string> capability;
  if (S_ISREG(st.st_mode)) {
    if (std::string value; GetXattr(path, kCapabilityXattr, value) == 0) capability = std::move(value);
  }
  if (::fchownat(dir_fd, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) return SystemError("chown " + name, errno);
  if (capability) {
    ShiftCapability(*capability, shift);
    if (::lsetxattr(path.c_str(), kCapabilityXattr, capability->data(), capability->size(), 0) != 0) {
      return SystemError("setxattr security.capability " + name, errno);
    }
  }
  if (!S_ISLNK(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID))) {
    if (::fchmodat(dir_fd, name.c_str(), st.st_mode & 07777, 0) != 0) return SystemError("chmod " + name, errno);
  }
  return {};
}

Status ShiftDir(int dir_fd, const IdShift& shift, int depth) {
  if (depth > kMaxDepth) return MakeError(ErrorCode::kInvalid, "directories nested deeper than " + std::to_string(kMaxDepth));
  auto names = ListNames(dir_fd);
  if (!names.ok()) return names.error();
  for (const auto& name : *names) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return SystemError("stat " + name, errno);
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return SystemError("open " + name, errno);
      BH_TRY(ShiftDir(sub.get(), shift, depth + 1));
    }
    BH_TRY(ShiftEntry(dir_fd, name, st, shift));
  }
  return {};
}

}  // namespace

Status CopyTree(const std::string& from, const std::string& to, const IdShift& shift) {
  TreeCopier copier(shift);
  return copier.CopyRoot(from, to);
}

Status ShiftOwners(const std::string& root, const IdShift& shift) {
  if (!shift.active()) return {};
  UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return SystemError("open " + root, errno);
  BH_TRY(ShiftDir(dir.get(), shift, 0));
  struct stat st;
  if (::fstat(dir.get(), &st) != 0) return SystemError("stat " + root, errno);
  return ShiftEntry(dir.get(), ".", st, shift);
}

}  // namespace bulkhead::storage
