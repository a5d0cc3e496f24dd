// read, write, stat, list, mkdir, move and remove (ctl_protocol.h, "File operations").
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "common/ctl_protocol.h"
#include "common/unique_fd.h"
#include "init/file_worker.h"

namespace bulkhead::init {
namespace {

using nlohmann::json;

constexpr size_t kChunk = 128 * 1024;

// Copies everything from `from` (until EOF) to `to`; `path` names the destination in errors.
Status CopyUntilEof(int from, int to, const std::string& path) {
  std::vector<char> buf(kChunk);
  while (true) {
    ssize_t n = ::read(from, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileError("internal", std::string("read the content: ") + std::strerror(errno));
    if (n == 0) return {};
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(to, buf.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoError(errno, "write", path);
      done += w;
    }
  }
}

std::string TempName(char kind) {
  uint64_t random = 0;
  if (::getrandom(&random, sizeof(random), 0) != sizeof(random)) random = (uint64_t(::getpid()) << 32) ^ uint64_t(::time(nullptr));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(random));
  return std::string(kWriteTempPrefix) + kind + buf;
}

// A named temporary must not outlive a worker that init kills mid-write (it SIGKILLs the
// worker's process group when the client goes): a guard process, in a group of its own, holds
// the read end of a pipe and removes the file when the pipe ends without the worker's word that
// the file is committed or removed already.
class TemporaryGuard {
 public:
  TemporaryGuard() = default;
  TemporaryGuard(const TemporaryGuard&) = delete;
  TemporaryGuard& operator=(const TemporaryGuard&) = delete;
  ~TemporaryGuard() { Release(); }

  Status Start(int dir_fd, const std::string& name) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoError(errno, "create a pipe for", name);
    UniqueFd read_end(fds[0]);
    word_.reset(fds[1]);
    const pid_t pid = ::fork();
    if (pid < 0) return ErrnoError(errno, "fork a guard for", name);
    if (pid == 0) Guard(read_end.get(), dir_fd, name.c_str());
    ::setpgid(pid, pid);  // (both sides: the group exists before either goes on)
    return {};
  }
  // The file needs no guarding any more.
  void Release() {
    if (!word_) return;
    (void)!::write(word_.get(), "k", 1);
    word_.reset();
  }

 private:
  [[noreturn]] static void Guard(int pipe, int dir_fd, const char* name) {
    ::setpgid(0, 0);
    // Nothing else of the worker's stays open here (its stdio is the connection to init).
    const unsigned low = static_cast<unsigned>(std::min(pipe, dir_fd)), high = static_cast<unsigned>(std::max(pipe, dir_fd));
    if (low > 0) ::close_range(0, low - 1, 0);
    if (high > low + 1) ::close_range(low + 1, high - 1, 0);
    ::close_range(high + 1, ~0U, 0);
    char word = 0;
    ssize_t n;
    while ((n = ::read(pipe, &word, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) ::unlinkat(dir_fd, name, 0);
    ::_exit(0);
  }

  UniqueFd word_;  // the write end; closed by the worker's death when it is not released
};

// The new content of a file that replaces `name` in `dir_fd` once complete. Unnamed
// (O_TMPFILE) where the filesystem allows, so nothing is left behind if the worker is killed
// mid-write; otherwise a uniquely named file beside the target, removed on failure, and by a
// TemporaryGuard if the worker is killed (gVisor's gofer has no O_TMPFILE). `kind`
// (kWriteAsWriter, ...) tells a watch what its commit stands for.
class ReplacementFile {
 public:
  ReplacementFile(int dir_fd, std::string dir, char kind) : dir_fd_(dir_fd), dir_(std::move(dir)), kind_(kind) {}
  ReplacementFile(const ReplacementFile&) = delete;
  ReplacementFile& operator=(const ReplacementFile&) = delete;
  ~ReplacementFile() {
    if (!temp_name_.empty()) ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
    guard_.Release();
  }

  Status Open() {
    fd_.reset(::openat(dir_fd_, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (fd_) return {};
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return ErrnoError(errno, "create a file in", dir_);
    return OpenNamed(&fd_);
  }
  int fd() const { return fd_.get(); }

  // Gives the file its final name: rename(2) over `name`, so readers see the old or the new
  // content, never a mix.
  Status Commit(const std::string& name, const std::string& path) {
    if (temp_name_.empty()) BH_TRY(LinkUnnamed());
    // Closed first, so a watch sees the close under the temporary's name (and hides it):
    // the rename then reads as the target's create and write (file_watch.cc).
    fd_.reset();
    if (::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name.c_str()) != 0) return ErrnoError(errno, "rename over", path);
    temp_name_.clear();
    guard_.Release();
    return {};
  }

 private:
  Status OpenNamed(UniqueFd* fd) {
    for (int attempt = 0; attempt < 16; ++attempt) {
      std::string name = TempName(kind_);
      // Guarded before it exists: a kill in between leaves nothing either.
      BH_TRY(guard_.Start(dir_fd_, name));
      fd->reset(::openat(dir_fd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (*fd) {
        temp_name_ = name;
        return {};
      }
      guard_.Release();
      if (errno != EEXIST) return ErrnoError(errno, "create a file in", dir_);
    }
    return FileError("internal", "cannot find an unused temporary name in " + dir_);
  }

  // linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH on older kernels and /proc/self/fd needs
  // /proc; with neither, the content is copied into a named file.
  Status LinkUnnamed() {
    for (int attempt = 0; attempt < 16; ++attempt) {
      std::string name = TempName(kind_);
      std::string proc_path = "/proc/self/fd/" + std::to_string(fd_.get());
      if (::linkat(fd_.get(), "", dir_fd_, name.c_str(), AT_EMPTY_PATH) == 0 ||
          (errno != EEXIST && ::linkat(AT_FDCWD, proc_path.c_str(), dir_fd_, name.c_str(), AT_SYMLINK_FOLLOW) == 0)) {
        temp_name_ = name;
        return {};
      }
      if (errno == ENOSPC || errno == EDQUOT) return ErrnoError(errno, "create a file in", dir_);
      if (errno != EEXIST) break;
    }
    UniqueFd named;
    BH_TRY(OpenNamed(&named));
    if (::lseek(fd_.get(), 0, SEEK_SET) != 0) return ErrnoError(errno, "seek", dir_);
    BH_TRY(CopyUntilEof(fd_.get(), named.get(), JoinPath(dir_, temp_name_)));
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return ErrnoError(errno, "stat", dir_);
    if (::fchown(named.get(), st.st_uid, st.st_gid) != 0 && errno != EPERM) return ErrnoError(errno, "chown", dir_);
    if (::fchmod(named.get(), st.st_mode & 07777) != 0) return ErrnoError(errno, "chmod", dir_);
    fd_ = std::move(named);
    return {};
  }

  int dir_fd_;
  std::string dir_;
  char kind_;
  UniqueFd fd_;
  std::string temp_name_;  // the file's name while it has a temporary one
  TemporaryGuard guard_;   // of a named temporary
};

// The extended attributes a write sets: its "xattrs" ({key: value}), each key under the
// "xattr_prefix". Checked before anything is written.
Result<std::map<std::string, std::string>> XattrsOf(const FileOpArgs& args, const EntryDetails& details) {
  auto given = args.StringMap("xattrs");
  if (!given.ok()) return given.error();
  std::map<std::string, std::string> xattrs;
  if (given->empty()) return xattrs;
  if (details.xattr_prefix.empty()) return FileError("invalid_argument", "\"xattrs\" needs an \"xattr_prefix\"");
  for (auto& [key, value] : *given) {
    std::string name = details.xattr_prefix + key;
    if (key.empty() || name.size() > XATTR_NAME_MAX || name.find('\0') != std::string::npos || value.size() > XATTR_SIZE_MAX) {
      return FileError("invalid_argument", "bad extended attribute \"" + key + "\"");
    }
    xattrs.emplace(std::move(name), std::move(value));
  }
  return xattrs;
}

// Sets `xattrs` on the open file. A filesystem without them (procfs, ...) stores none, as envd.
Status SetXattrs(int fd, const std::map<std::string, std::string>& xattrs, const std::string& path) {
  for (const auto& [name, value] : xattrs) {
    if (::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0) == 0) continue;
    if (errno == ENOTSUP) return {};
    if (errno == E2BIG || errno == ERANGE) return FileError("disk_full", "no room for the extended attributes of " + path);
    return ErrnoError(errno, "set an extended attribute of", path);
  }
  return {};
}

// "append": written in place, at the end of the existing file (or a new one).
Status AppendInPlace(const std::string& path, std::optional<mode_t> mode, const std::optional<FileOwner>& owner) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return FileError("is_a_directory", path + " is a directory");
    if (!S_ISREG(st.st_mode)) return FileError("invalid_argument", path + " is not a regular file");
  }
  bool created = false;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
  if (!fd && errno == ENOENT) {
    fd.reset(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
                    mode.value_or(0644)));
    created = fd.valid();
  }
  if (!fd) return ErrnoError(errno, "open", path);
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) return FileError("invalid_argument", path + " is not a regular file");
  ::fcntl(fd.get(), F_SETFL, O_APPEND);  // blocking again
  // Before fchmod, which chown would strip of set-id bits.
  if (owner && ::fchown(fd.get(), owner->uid, owner->gid) != 0) return ErrnoError(errno, "chown", path);
  if (mode && !created && ::fchmod(fd.get(), *mode) != 0) return ErrnoError(errno, "chmod", path);
  BH_TRY(CopyUntilEof(0, fd.get(), path));
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "stat", path);
  return WriteJsonLine(EntryJson(path, st, std::nullopt));
}

// Appends the entries below `dir_fd` (which `dir_path` names) down to `depth` levels.
struct Listing {
  std::vector<std::pair<std::string, json>> entries;  // (path, Entry)
  bool truncated = false;
};

Status ListDirectory(int dir_fd, const std::string& dir_path, int depth, const EntryDetails& details, Listing* out) {
  auto names = DirectoryNames(dir_fd, dir_path);
  if (!names.ok()) return names.error();
  for (const auto& name : *names) {
    if (out->entries.size() >= ctl::kMaxListEntries) {
      out->truncated = true;
      return {};
    }
    std::string path = JoinPath(dir_path, name);
    auto entry = EntryAt(dir_fd, name, path, details);
    if (!entry.ok()) continue;  // removed meanwhile
    bool is_dir = (*entry)["type"] == "dir";
    out->entries.emplace_back(path, std::move(*entry));
    if (is_dir && depth > 1) {
      // O_NOFOLLOW: a directory swapped for a symlink since fstatat is not entered.
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      // A subdirectory that cannot be read is listed without its contents.
      if (sub) (void)ListDirectory(sub.get(), path, depth - 1, details, out);
      if (out->truncated) return {};
    }
  }
  return {};
}

// Removes everything inside `dir_fd`. Every step is relative to an open directory and never
// follows a symlink, so a symlink swapped in mid-walk cannot redirect it.
Status RemoveContents(int dir_fd, const std::string& dir_path) {
  auto names = DirectoryNames(dir_fd, dir_path);
  if (!names.ok()) return names.error();
  for (const auto& name : *names) {
    std::string path = JoinPath(dir_path, name);
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoError(errno, "stat", path);
    }
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub) {
        BH_TRY(RemoveContents(sub.get(), path));
        sub.reset();
        if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return ErrnoError(errno, "remove", path);
        continue;
      }
      if (errno == ENOENT) continue;
      // No longer a directory (ELOOP, ENOTDIR): unlink whatever it is now.
      if (errno != ELOOP && errno != ENOTDIR) return ErrnoError(errno, "open", path);
    }
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) return ErrnoError(errno, "remove", path);
  }
  return {};
}

// Whether a regular file's st_size is what reading it yields: not so on a kernel filesystem,
// whose files (procfs, sysfs, cgroupfs: /proc/sys/kernel/random/boot_id) report 0 bytes or a
// page whatever they hold.
bool SizeIsKnown(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case DEBUGFS_MAGIC:
    case TRACEFS_MAGIC:
    case SECURITYFS_MAGIC:
      return false;
    default:
      return true;
  }
}

// The parent directory of `path` (not "/"), opened, and the last component.
Result<std::pair<UniqueFd, std::string>> OpenParent(const std::string& path) {
  auto [dir, name] = SplitParent(path);
  if (name == "..") return FileError("invalid_argument", path + " ends in \"..\"");
  UniqueFd dir_fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return ErrnoError(errno, "open", dir);
  return std::pair{std::move(dir_fd), name};
}

}  // namespace

Status ReadFileOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  // Checked before open: opening a fifo or a device could block or have side effects.
  struct stat st;
  if (::stat(path->c_str(), &st) != 0) return ErrnoError(errno, "stat", *path);
  if (S_ISDIR(st.st_mode)) return FileError("is_a_directory", *path + " is a directory");
  if (!S_ISREG(st.st_mode)) return FileError("invalid_argument", *path + " is not a regular file");
  UniqueFd fd(::open(path->c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return ErrnoError(errno, "open", *path);
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "stat", *path);
  if (!S_ISREG(st.st_mode)) return FileError("invalid_argument", *path + " is not a regular file");

  // A size that says nothing is not announced, and the file is read to its end.
  const bool known = SizeIsKnown(fd.get());
  BH_TRY(WriteJsonLine(known ? json{{"size", uint64_t(st.st_size)}} : json::object()));
  std::vector<char> buf(kChunk);
  uint64_t left = known ? uint64_t(st.st_size) : 0;
  while (!known || left > 0) {
    ssize_t n = ::read(fd.get(), buf.data(), known ? std::min<uint64_t>(left, buf.size()) : buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "read", *path);
    if (n == 0) {
      if (!known) return {};
      return FileError("internal", *path + " shrank while it was read");
    }
    BH_TRY(WriteAll(1, std::string_view(buf.data(), size_t(n))));
    if (known) left -= uint64_t(n);
  }
  return {};
}

Status WriteFileOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto mode = args.Mode("mode");
  if (!mode.ok()) return mode.error();
  auto parents = args.Bool("parents", true);
  if (!parents.ok()) return parents.error();
  auto append = args.Bool("append", false);
  if (!append.ok()) return append.error();
  auto owner = args.Owner("owner");
  if (!owner.ok()) return owner.error();
  auto details = EntryDetailsOf(args);
  if (!details.ok()) return details.error();
  auto xattrs = XattrsOf(args, *details);
  if (!xattrs.ok()) return xattrs.error();
  if (*path == "/") return FileError("is_a_directory", "/ is a directory");

  if (*parents) BH_TRY(MakeDirectories(SplitParent(*path).first, 0755, /*path_is_a_parent=*/true, *owner));
  if (*append) return AppendInPlace(*path, *mode, *owner);

  auto parent = OpenParent(*path);
  if (!parent.ok()) return parent.error();
  auto& [dir_fd, name] = *parent;
  // The path itself is replaced: a symlink there becomes the new file, it is not written through.
  struct stat old;
  bool exists = ::fstatat(dir_fd.get(), name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0;
  if (!exists && errno != ENOENT) return ErrnoError(errno, "stat", *path);
  if (exists && S_ISDIR(old.st_mode)) return FileError("is_a_directory", *path + " is a directory");
  bool replaces_file = exists && S_ISREG(old.st_mode);

  // As envd's upload: a file given to an owner is chowned (a chmod event), then written.
  const char kind = !*owner ? kWriteAsWriter : exists ? kWriteReplaceOwned : kWriteNewOwned;
  ReplacementFile file(dir_fd.get(), SplitParent(*path).first, kind);
  BH_TRY(file.Open());
  BH_TRY(CopyUntilEof(0, file.fd(), *path));
  // The file goes to "owner" if given, else the old file's owner is kept where the worker
  // may (root); before fchmod, which chown would strip of set-id bits.
  if (*owner) {
    if (::fchown(file.fd(), (*owner)->uid, (*owner)->gid) != 0) return ErrnoError(errno, "chown", *path);
  } else if (replaces_file && (old.st_uid != ::geteuid() || old.st_gid != ::getegid())) {
    if (::fchown(file.fd(), old.st_uid, old.st_gid) != 0 && errno != EPERM) return ErrnoError(errno, "chown", *path);
  }
  // A new inode: an overwrite keeps none of the old file's.
  BH_TRY(SetXattrs(file.fd(), *xattrs, *path));
  mode_t final_mode = mode->value_or(replaces_file ? old.st_mode & 07777 : 0644);
  if (::fchmod(file.fd(), final_mode) != 0) return ErrnoError(errno, "chmod", *path);
  BH_TRY(file.Commit(name, *path));

  auto entry = EntryAt(dir_fd.get(), name, *path, *details);
  if (!entry.ok()) return entry.error();
  return WriteJsonLine(*entry);
}

Status StatOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto details = EntryDetailsOf(args);
  if (!details.ok()) return details.error();
  auto entry = EntryOf(*path, *details);
  if (!entry.ok()) return entry.error();
  return WriteJsonLine(*entry);
}

Status ListOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto depth = args.Int("depth", 1, 1, 32);
  if (!depth.ok()) return depth.error();
  auto details = EntryDetailsOf(args);
  if (!details.ok()) return details.error();
  UniqueFd root(::open(path->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return ErrnoError(errno, "open", *path);
  Listing listing;
  BH_TRY(ListDirectory(root.get(), *path, *depth, *details, &listing));
  std::sort(listing.entries.begin(), listing.entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  json entries = json::array();
  for (auto& [entry_path, entry] : listing.entries) entries.push_back(std::move(entry));
  return WriteJsonLine(json{{"entries", std::move(entries)}, {"truncated", listing.truncated}});
}

Status MkdirOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto parents = args.Bool("parents", true);
  if (!parents.ok()) return parents.error();
  auto mode = args.Mode("mode");
  if (!mode.ok()) return mode.error();
  auto owner = args.Owner("owner");
  if (!owner.ok()) return owner.error();
  auto details = EntryDetailsOf(args);
  if (!details.ok()) return details.error();
  if (*parents) {
    BH_TRY(MakeDirectories(*path, mode->value_or(0755), /*path_is_a_parent=*/false, *owner));
  } else if (::mkdir(path->c_str(), mode->value_or(0755)) != 0) {
    return ErrnoError(errno, "mkdir", *path);
  } else if (*owner && ::lchown(path->c_str(), (*owner)->uid, (*owner)->gid) != 0) {
    return ErrnoError(errno, "chown", *path);
  }
  auto entry = EntryOf(*path, *details);
  if (!entry.ok()) return entry.error();
  return WriteJsonLine(*entry);
}

Status MoveOp(const FileOpArgs& args) {
  auto from = args.Path("from");
  if (!from.ok()) return from.error();
  auto to = args.Path("to");
  if (!to.ok()) return to.error();
  auto details = EntryDetailsOf(args);
  if (!details.ok()) return details.error();
  if (::rename(from->c_str(), to->c_str()) != 0) return ErrnoError(errno, "move " + *from + " to", *to);
  auto entry = EntryOf(*to, *details);
  if (!entry.ok()) return entry.error();
  return WriteJsonLine(*entry);
}

Status RemoveOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto recursive = args.Bool("recursive", false);
  if (!recursive.ok()) return recursive.error();
  if (*path == "/") return FileError("invalid_argument", "/ cannot be removed");

  auto parent = OpenParent(*path);
  if (!parent.ok()) return parent.error();
  auto& [dir_fd, name] = *parent;
  struct stat st;
  if (::fstatat(dir_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError(errno, "stat", *path);
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir_fd.get(), name.c_str(), 0) != 0) return ErrnoError(errno, "remove", *path);
    return {};
  }
  if (*recursive) {
    UniqueFd dir(::openat(dir_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return ErrnoError(errno, "open", *path);
    BH_TRY(RemoveContents(dir.get(), *path));
  }
  if (::unlinkat(dir_fd.get(), name.c_str(), AT_REMOVEDIR) != 0) {
    // rmdir reports a non-empty directory as ENOTEMPTY or EEXIST.
    return ErrnoError(errno == EEXIST ? ENOTEMPTY : errno, "remove", *path);
  }
  return {};
}

}  // namespace bulkhead::init
