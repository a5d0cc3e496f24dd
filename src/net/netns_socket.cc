// Work in another network namespace: a thread's network namespace is its own (setns on one
// thread leaves the others alone), and a socket stays in the namespace it was made in. So a
// short-lived thread enters the namespace, does the work and ends.
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <thread>

#include "net/netns.h"

namespace bulkhead::net {

Status RunInNetns(int netns_fd, const std::function<Status()>& fn) {
  // Never the namespace this process lives in: routes, tables and listeners made for a
  // sandbox would take the host's network (its default route, every TCP connection). A
  // descriptor that names it is a bug upstream (a reused pid's namespace, say): refused.
  struct stat target {}, own {};
  if (::fstat(netns_fd, &target) != 0) return SystemError("stat sandbox network namespace", errno);
  if (::stat("/proc/thread-self/ns/net", &own) == 0 && target.st_dev == own.st_dev && target.st_ino == own.st_ino)
    return MakeError(ErrorCode::kInternal, "refusing to configure the host's own network namespace as a sandbox's");
  Status result;
  std::thread worker([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      result = SystemError("enter sandbox network namespace", errno);
      return;
    }
    result = fn();
  });
  worker.join();
  return result;
}

Result<UniqueFd> SocketInNetns(int netns_fd, int domain, int type) {
  UniqueFd fd;
  BH_TRY(RunInNetns(netns_fd, [&]() -> Status {
    fd.reset(::socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return SystemError("socket in sandbox network namespace", errno);
    return {};
  }));
  return fd;
}

}  // namespace bulkhead::net
