#include "storage/fs_util.h"
#include "common/time_format.h"

#include <dirent.h>
#include <fcntl.h>
#include <locale.h>
#include <sched.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "common/scope_guard.h"

namespace bulkhead::storage {
namespace {

// Deeper directories are moved up to the top of the tree being removed, so the walk holds
// at most this many descriptors however deep a sandbox nested its directories.
constexpr int kMaxRemoveDepth = 32;

std::string Dirname(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string Basename(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

// Empties the directory dir_fd. root_fd is the top of the tree being removed.
Status EmptyDir(int dir_fd, int root_fd, int depth, int* moved_counter) {
  for (;;) {
    auto names = ListNames(dir_fd);
    if (!names.ok()) return names.error();
    if (names->empty()) return {};
    for (const auto& name : *names) {
      struct stat st;
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return SystemError("stat " + name, errno);
      }
      if (!S_ISDIR(st.st_mode)) {
        if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
          return SystemError("unlink " + name, errno);
        }
        continue;
      }
      if (depth >= kMaxRemoveDepth) {
        // Move it to the top; a later pass over the top directory removes it.
        for (;;) {
          std::string moved = ".bulkhead-rm-" + std::to_string((*moved_counter)++);
          if (::renameat2(dir_fd, name.c_str(), root_fd, moved.c_str(), RENAME_NOREPLACE) == 0) break;
          if (errno != EEXIST) return SystemError("rename " + name, errno);
        }
        continue;
      }
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) {
        if (errno == ENOENT) continue;
        return SystemError("open " + name, errno);
      }
      BH_TRY(EmptyDir(sub.get(), root_fd, depth + 1, moved_counter));
      if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        return SystemError("rmdir " + name, errno);
      }
    }
  }
}

thread_local int64_t tree_bytes_sum = 0;

int AddAllocated(const char*, const struct stat* st, int, struct FTW*) {
  tree_bytes_sum += static_cast<int64_t>(st->st_blocks) * 512;
  return 0;
}

std::string UnescapeMountField(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool octal = true;
      for (size_t j = 1; j <= 3; ++j) {
        char c = s[i + j];
        if (c < '0' || c > '7') octal = false;
        v = v * 8 + (c - '0');
      }
      if (octal) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return SystemError("stat " + path, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return SystemError("unlink " + path, errno);
    return {};
  }
  UniqueFd root(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return SystemError("open " + path, errno);
  int moved_counter = 0;
  BH_TRY(EmptyDir(root.get(), root.get(), 0, &moved_counter));
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return SystemError("rmdir " + path, errno);
  return {};
}

Result<int64_t> TreeAllocatedBytes(const std::string& path) {
  tree_bytes_sum = 0;
  if (::nftw(path.c_str(), AddAllocated, 16, FTW_PHYS | FTW_MOUNT) != 0) {
    return SystemError("walk " + path, errno);
  }
  return tree_bytes_sum;
}

Status MakeDir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  UniqueFd parent(::open(Dirname(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent) return SystemError("open " + Dirname(path), errno);
  return MakeDirAt(parent.get(), Basename(path), mode, uid, gid);
}

Status MakeDirAt(int dir_fd, const std::string& name, mode_t mode, uid_t uid, gid_t gid) {
  if (::mkdirat(dir_fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return SystemError("mkdir " + name, errno);
  }
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return SystemError("open " + name, errno);
  // chown before chmod: chown clears the set-id bits.
  if (::fchown(fd.get(), uid, gid) != 0) return SystemError("chown " + name, errno);
  if (::fchmod(fd.get(), mode) != 0) return SystemError("chmod " + name, errno);
  return {};
}

Status WriteFile(const std::string& path, const std::string& content, mode_t mode, uid_t uid, gid_t gid) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return SystemError("create " + path, errno);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("write " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  if (::fchown(fd.get(), uid, gid) != 0) return SystemError("chown " + path, errno);
  if (::fchmod(fd.get(), mode) != 0) return SystemError("chmod " + path, errno);
  return {};
}

Result<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + path, errno);
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("read " + path, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

UniqueFd OpenDirNoFollow(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

Result<std::vector<std::string>> ListNames(int dir_fd) {
  int fd = ::dup(dir_fd);
  if (fd < 0) return SystemError("dup", errno);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    ::close(fd);
    return SystemError("fdopendir", err);
  }
  ::rewinddir(dir);  // the dup shares the offset with earlier passes
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  return names;
}

std::optional<MountEntry> FindMount(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return std::nullopt;
  std::ifstream in("/proc/self/mountinfo");
  std::optional<MountEntry> found;
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options [optional...] - fstype source super_options
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point, options, word;
    fields >> id >> parent >> devno >> root >> mount_point >> options;
    while (fields >> word && word != "-") {
    }
    MountEntry entry;
    fields >> entry.fs_type >> entry.source >> entry.super_options;
    entry.mount_point = UnescapeMountField(mount_point);
    entry.source = UnescapeMountField(entry.source);
    if (entry.mount_point == resolved) found = entry;  // the last one is on top
  }
  return found;
}

bool IsContainedName(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) return false;
    start = end + 1;
  }
  return true;
}

Status RunChrooted(int root_fd, const std::function<Status()>& work) {
  Status result;
  std::thread worker([&] {
    locale_t utf8 = ::newlocale(LC_ALL_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (utf8 != static_cast<locale_t>(0)) ::uselocale(utf8);
    ScopeGuard restore_locale([utf8] {
      if (utf8 == static_cast<locale_t>(0)) return;
      ::uselocale(LC_GLOBAL_LOCALE);
      ::freelocale(utf8);
    });
    if (::unshare(CLONE_FS) != 0) {
      result = SystemError("unshare(CLONE_FS)", errno);
      return;
    }
    if (::fchdir(root_fd) != 0 || ::chroot(".") != 0) {
      result = SystemError("chroot", errno);
      return;
    }
    ::umask(022);
    result = work();
  });
  worker.join();
  return result;
}

bool IsSafeName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum) continue;
    if (i > 0 && (c == '.' || c == '_' || c == '-')) continue;
    return false;
  }
  return true;
}

std::string NowRfc3339() { return Rfc3339(std::time(nullptr)); }

}  // namespace bulkhead::storage
