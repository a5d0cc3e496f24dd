#include "fuzz_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace bulkhead::fuzz {
namespace {

int g_real_root = -1;  // O_PATH fds of the real root and working directory
int g_real_cwd = -1;
int g_real_streams[3] = {-1, -1, -1};  // copies of fds 0, 1 and 2
struct sigaction g_previous_abort {};
std::once_flag g_abort_chained;

// Back to the real root and working directory, from wherever this thread is chrooted (a
// no-op outside a chroot). Async-signal-safe.
void EscapeChroot() {
  if (g_real_root < 0) return;
  if (::fchdir(g_real_root) == 0 && ::chroot(".") == 0) (void)!::fchdir(g_real_cwd);
  RestoreStandardStreams();
}

// SIGABRT (an assertion, std::terminate) goes to libFuzzer's handler, which writes the crash
// file: leave the chroot first.
void AbortHandler(int signal, siginfo_t* info, void* context) {
  EscapeChroot();
  if (g_previous_abort.sa_flags & SA_SIGINFO) {
    if (g_previous_abort.sa_sigaction) g_previous_abort.sa_sigaction(signal, info, context);
  } else if (g_previous_abort.sa_handler != SIG_DFL && g_previous_abort.sa_handler != SIG_IGN) {
    g_previous_abort.sa_handler(signal);
  }
  ::signal(SIGABRT, SIG_DFL);
  ::raise(SIGABRT);
}

std::vector<std::string>& TempDirs() {
  static auto* dirs = new std::vector<std::string>();
  return *dirs;
}

void RemoveTempDirs() {
  for (const std::string& dir : TempDirs()) RemoveTree(dir);
}

void RemoveContents(int dir_fd) {
  DIR* dir = ::fdopendir(::dup(dir_fd));
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  for (const std::string& name : names) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      ::fchmodat(dir_fd, name.c_str(), 0700, 0);
      int sub = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        RemoveContents(sub);
        ::close(sub);
      }
      ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);
    } else {
      ::unlinkat(dir_fd, name.c_str(), 0);
    }
  }
}

uint64_t Fnv1a(std::string_view data, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : data) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

void SnapshotDir(int dir_fd, const std::string& prefix, TreeSnapshot& out) {
  DIR* dir = ::fdopendir(::dup(dir_fd));
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  for (const std::string& name : names) {
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string state = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
    if (S_ISREG(st.st_mode)) {
      int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      uint64_t hash = Fnv1a({});
      if (fd >= 0) {
        char buf[65536];
        ssize_t n;
        while ((n = ::read(fd, buf, sizeof buf)) > 0) hash = Fnv1a(std::string_view(buf, size_t(n)), hash);
        ::close(fd);
      }
      state += " size " + std::to_string(st.st_size) + " hash " + std::to_string(hash) + " links " +
               std::to_string(st.st_nlink);
    } else if (S_ISLNK(st.st_mode)) {
      char target[4097];
      ssize_t n = ::readlinkat(dir_fd, name.c_str(), target, sizeof target);
      state += " -> " + std::string(target, n > 0 ? size_t(n) : 0);
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      state += " rdev " + std::to_string(st.st_rdev);
    }
    out[path] = state;
    if (S_ISDIR(st.st_mode)) {
      int sub = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        SnapshotDir(sub, path, out);
        ::close(sub);
      }
    }
  }
}

}  // namespace

void Fail(std::string_view what) {
  EscapeChroot();
  std::string line = "\n==== fuzz invariant broken: " + std::string(what) + "\n";
  (void)!::write(2, line.data(), line.size());
  // Also to $FUZZ_FAIL_LOG (scripts/fuzz.sh): a target run with -close_fd_mask=2 has no stderr.
  if (const char* log = std::getenv("FUZZ_FAIL_LOG")) {
    const int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  ::abort();
}

std::string MakeTempDir(std::string_view name) {
  // The pid in the name lets scripts/fuzz.sh remove what a crashed run left behind.
  std::string pattern = "/tmp/bh-fuzz-" + std::string(name) + "-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) Fail("mkdtemp: " + std::string(std::strerror(errno)));
  if (TempDirs().empty()) std::atexit(RemoveTempDirs);
  TempDirs().push_back(pattern);
  return pattern;
}

void RemoveTree(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    RemoveContents(fd);
    ::close(fd);
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

void PrepareChrootEscape() {
  g_real_root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  g_real_cwd = ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd) g_real_streams[fd] = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(g_real_streams[2])));
}

void RestoreStandardStreams() {
  for (int fd = 0; fd < 3; ++fd) {
    if (g_real_streams[fd] >= 0) ::dup2(g_real_streams[fd], fd);
  }
}

void RunChrootedThread(const std::string& root, const std::function<void()>& work) {
  if (g_real_root < 0) Fail("PrepareChrootEscape was not called");
  // libFuzzer installs its signal handlers after LLVMFuzzerInitialize: chained on first use.
  std::call_once(g_abort_chained, [] {
    struct sigaction action {};
    action.sa_sigaction = AbortHandler;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGABRT, &action, &g_previous_abort);
  });
  std::string failure;
  std::thread worker([&] {
    // libFuzzer's -timeout alarm must be handled by a thread with the real root.
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm, nullptr);
    if (::unshare(CLONE_FS | CLONE_FILES) != 0) {
      failure = std::string("unshare: ") + std::strerror(errno);
      return;
    }
    if (::chroot(root.c_str()) != 0 || ::chdir("/") != 0) {
      failure = "chroot " + root + ": " + std::strerror(errno);
      return;
    }
    work();
  });
  worker.join();
  if (!failure.empty()) Fail(failure);
}

int MemoryFile(std::string_view data) {
  int fd = ::memfd_create("fuzz-input", MFD_CLOEXEC);
  if (fd < 0) Fail(std::string("memfd_create: ") + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) Fail(std::string("write memfd: ") + std::strerror(errno));
    done += size_t(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

std::string ReadWholeFd(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  off_t offset = 0;
  while ((n = ::pread(fd, buf, sizeof buf, offset)) > 0) {
    out.append(buf, size_t(n));
    offset += n;
  }
  return out;
}

TreeSnapshot SnapshotTree(const std::string& dir) {
  TreeSnapshot out;
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return out;
  SnapshotDir(fd, "", out);
  ::close(fd);
  return out;
}

std::vector<std::string> ChangedPaths(const TreeSnapshot& before, const TreeSnapshot& after) {
  std::vector<std::string> changed;
  for (const auto& [path, state] : before) {
    auto it = after.find(path);
    if (it == after.end() || it->second != state) changed.push_back(path);
  }
  for (const auto& [path, state] : after) {
    if (!before.count(path)) changed.push_back(path);
  }
  return changed;
}

bool IsAtOrBelow(std::string_view path, std::string_view base) {
  if (base.empty()) return true;  // the relative root holds everything
  if (base == "/") return !path.empty() && path[0] == '/';
  if (path.size() < base.size() || path.substr(0, base.size()) != base) return false;
  return path.size() == base.size() || path[base.size()] == '/';
}

}  // namespace bulkhead::fuzz

// Sanitizer hooks: a report from a chrooted thread leaves the chroot before symbolizing and
// before libFuzzer writes the crash file.
extern "C" void __asan_on_error() { bulkhead::fuzz::EscapeChroot(); }
extern "C" void __sanitizer_report_error_summary(const char* summary) {
  bulkhead::fuzz::EscapeChroot();
  (void)!::write(2, summary, std::strlen(summary));
  (void)!::write(2, "\n", 1);
}
