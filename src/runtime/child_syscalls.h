// What a tier's setup child calls while it shares the daemon's memory (CLONE_VM|CLONE_VFORK,
// clone_shared.h) until it execs: the kernel directly rather than the libc functions that
// sanitizers intercept, since an interceptor would record the child's calls in the daemon's
// own bookkeeping (ThreadSanitizer's tables of descriptors and signal handlers); no allocation,
// no locks. mount, mkdir and the like are not intercepted. Inline: each file that includes it
// is built without ASan and TSan instrumentation (CMakeLists.txt).
#pragma once
#include <fcntl.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace bulkhead::runtime::child {

// A setup step failed: what and why go to the plan the parent reads once it is back
// (CLONE_VFORK), and the child exits.
template <typename Plan>
[[noreturn]] void Fail(Plan* plan, const char* step) {
  plan->failed_step = step;
  plan->failed_errno = errno;
  _exit(127);
}

// STEP(condition, "what it does"): Fail unless it holds (`plan` in scope).
#define STEP(cond, name)                         \
  do {                                           \
    if (!(cond)) ::bulkhead::runtime::child::Fail(plan, name); \
  } while (0)

inline int Open(const char* path, int flags, mode_t mode = 0) {
  return static_cast<int>(::syscall(SYS_openat, AT_FDCWD, path, flags, mode));
}
inline void Close(int fd) { ::syscall(SYS_close, fd); }
inline int Dup3(int from, int to, int flags) { return static_cast<int>(::syscall(SYS_dup3, from, to, flags)); }
inline long Write(int fd, const void* data, size_t size) { return ::syscall(SYS_write, fd, data, size); }
inline int Ioctl(int fd, unsigned long request, void* arg) {
  return static_cast<int>(::syscall(SYS_ioctl, fd, request, arg));
}
inline int Prctl(int option, unsigned long arg) { return static_cast<int>(::syscall(SYS_prctl, option, arg, 0, 0, 0)); }
inline int SetRlimit(int resource, const struct rlimit* limit) {
  return static_cast<int>(::syscall(SYS_prlimit64, 0, resource, limit, nullptr));
}
inline int GetRlimit(int resource, struct rlimit* limit) {
  return static_cast<int>(::syscall(SYS_prlimit64, 0, resource, nullptr, limit));
}

// Signal handlers are the daemon's: the child must not run them, nor keep what the daemon
// ignores across its exec. (The kernel's struct sigaction, as rt_sigaction takes it.)
inline void ResetSignalHandlers() {
  struct KernelSigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    uint64_t mask;
  };
  const KernelSigaction default_action{SIG_DFL, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) ::syscall(SYS_rt_sigaction, sig, &default_action, nullptr, sizeof(uint64_t));
  }
}

// Unblocks every signal (the parent blocks them all around the clone).
inline void UnblockSignals() {
  const uint64_t none = 0;
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, sizeof none);
}

// A detached clone of `source`, nosuid and nodev, read-only unless `writable`, its owners
// seen through `idmap` (a user namespace's mapping; -1 = as they are on the host). Answers the
// mount's descriptor, or -1 with errno set; `*step` names what failed.
inline int CloneTree(const char* source, bool recursive, bool writable, int idmap, const char** step) {
  int fd = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, source,
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0)));
  if (fd < 0) {
    *step = "open_tree";
    return -1;
  }
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY);
  if (idmap >= 0) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(idmap);
  }
  if (::syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof attr) != 0) {
    const int err = errno;
    Close(fd);
    errno = err;
    *step = idmap >= 0 ? "mount_setattr idmap" : "mount_setattr";
    return -1;
  }
  return fd;
}

// The failed step of a child whose RealDirOrAbsent check failed (tier.h UnbootableFiles).
inline constexpr char kRootMountPointStep[] = "a mount point in the sandbox root is not a directory";

// Whether `name` in the directory `dir_fd` is a real directory, or absent (then a mkdir, which
// never follows a symlink, makes it), not a symlink or anything else: what a sandbox's own
// files hold at a mount point must not steer the mount elsewhere.
inline bool RealDirOrAbsent(int dir_fd, const char* name) {
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, dir_fd, name, &how, sizeof how));
  if (fd >= 0) Close(fd);
  return fd >= 0 || errno == ENOENT;
}

// The failed step of a child that could not make or enter a volume's mount point (tier.h
// VolumeMountPointError).
inline constexpr char kVolumeMountPointStep[] = "volume mount point";

// The directory at `base` + `components` (O_PATH), or -1 with errno set. A component that is a
// symlink is refused rather than followed, so a link the sandbox planted in its files cannot
// aim a mount (or a mkdir) at a host path. Missing ones are made, owned by `owner` (the
// sandbox's root), where `create`; `base` is read-only otherwise.
inline int OpenMountPoint(const char* base, const std::vector<std::string>& components, bool create, uid_t owner) {
  int dir = Open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (const std::string& name : components) {
    if (dir < 0) return -1;
    struct open_how how {};
    how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    int next = static_cast<int>(::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how));
    if (next < 0 && errno == ENOENT) {
      if (!create) {
        errno = EROFS;
      } else if ((::mkdirat(dir, name.c_str(), 0755) == 0 || errno == EEXIST) &&
                 ::fchownat(dir, name.c_str(), owner, owner, AT_SYMLINK_NOFOLLOW) == 0) {
        next = static_cast<int>(::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how));
      }
    }
    const int err = errno;
    Close(dir);
    errno = err;
    dir = next;
  }
  return dir;
}

// Brings up loopback in the child's (new) network namespace.
inline bool LoopbackUp() {
  int s = static_cast<int>(::syscall(SYS_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s < 0) return false;
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool up = Ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags |= IFF_UP;
  up = up && Ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  const int err = errno;
  Close(s);
  errno = err;
  return up;
}

}  // namespace bulkhead::runtime::child
