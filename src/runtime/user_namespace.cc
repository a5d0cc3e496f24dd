#include "runtime/user_namespace.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "runtime/clone_shared.h"

namespace bulkhead::runtime {
namespace {

Status WriteFile(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + path, errno);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return SystemError("write " + path, errno);
  return {};
}

// The user-namespace holder: it makes the namespace, then only has to exist until the parent
// has an fd for it, and is then killed. (Not "wait for EOF on a pipe": a concurrent clone on
// another thread copies our descriptors, and a copy of the write end would keep the pipe open.)
//
// It makes the namespace as the sandbox's own host uid, not as root, so that this uid owns it.
// The kernel counts per-user resources (inotify instances and watches, pending signals, locked
// memory, message queues...) at every namespace level up to the host's, there against the
// namespace's owner and the host's limit for one user: with root as every sandbox's owner, all
// sandboxes and the host's root would share one count (128 inotify instances by default), and
// one sandbox could exhaust it for its neighbours and the host. Owned by its own uid, each
// sandbox gets the host's per-user limits to itself. (Ownership gives capabilities in the
// namespace only to processes outside it with that uid, and there are none: the uid is the
// sandbox's root, inside it.)
//
// It runs beside the daemon in the daemon's memory and with its thread pointer: not
// instrumented, and raw syscalls only, since the sanitizer runtimes' wrappers would take it for
// the daemon's thread (a sanitizer build, scripts/sanitize.sh).
struct Holder {
  uid_t owner;
  pid_t daemon;
  std::atomic<int> made{0};  // 0 until the namespace exists, then 1, or -errno
};

__attribute__((no_sanitize("address", "thread"))) int HoldNamespace(void* arg) {
  auto* holder = static_cast<Holder*>(arg);
  // Raw syscalls: this child shares the daemon's memory (CLONE_VM), and glibc's setresuid
  // would change the credentials of every thread of the daemon.
  const uid_t id = holder->owner;
  const bool ok = ::syscall(SYS_setresgid, id, id, id) == 0 && ::syscall(SYS_setresuid, id, id, id) == 0 &&
                  ::syscall(SYS_unshare, CLONE_NEWUSER) == 0;
  const int err = ok ? 0 : errno;
  // It dies with the daemon (set after the credential changes, which clear it): a holder
  // outliving a killed daemon would keep its copies of the daemon's descriptors open, the
  // clients' connections and the state dir's lock among them.
  if (::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL) != 0 || ::syscall(SYS_getppid) != holder->daemon) {
    ::syscall(SYS_exit, 1);
  }
  holder->made.store(ok ? 1 : -err);
  for (;;) ::syscall(SYS_pause);
}

}  // namespace

Result<UniqueFd> CreateUserNamespace(uid_t host_id, uid_t first_id) {
  // A tiny child that owns the new namespace until we have a descriptor for it.
  alignas(16) static thread_local char stack[16 * 1024];
  Holder holder{.owner = host_id, .daemon = ::getpid()};
  pid_t pid = CloneSharingMemory(HoldNamespace, stack + sizeof stack, CLONE_VM | SIGCHLD, &holder);
  if (pid < 0) return SystemError("clone user namespace holder", errno);
  ScopeGuard reap([&] {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, __WALL);
  });
  // Three syscalls away: yield a few times, then sleep briefly (it may not have a CPU yet).
  for (int polls = 0; holder.made.load() == 0; ++polls) {
    if (polls >= 100000) return MakeError(ErrorCode::kInternal, "user namespace holder did not start");
    if (polls < 50) {
      ::sched_yield();
    } else {
      ::usleep(20);
    }
  }
  if (holder.made.load() < 0) return SystemError("make user namespace", -holder.made.load());
  std::string map = std::to_string(first_id) + " " + std::to_string(host_id) + " " + std::to_string(kIdCount) + "\n";
  std::string proc = "/proc/" + std::to_string(pid);
  BH_TRY(WriteFile(proc + "/uid_map", map));
  BH_TRY(WriteFile(proc + "/gid_map", map));
  UniqueFd ns(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return SystemError("open user namespace", errno);
  return ns;
}

}  // namespace bulkhead::runtime
