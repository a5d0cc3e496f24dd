// Sockets in another network namespace: a thread's network namespace is its own (setns on one
// thread leaves the others alone), and a socket stays in the namespace it was made in. So a
// short-lived thread enters the namespace, makes the socket and ends.
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <thread>

#include "net/netns.h"

namespace bulkhead::net {

Result<UniqueFd> SocketInNetns(int netns_fd, int domain, int type) {
  int fd = -1, err = 0;
  std::thread worker([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    fd = ::socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) err = errno;
  });
  worker.join();
  if (fd < 0) return SystemError("socket in sandbox network namespace", err);
  return UniqueFd(fd);
}

Result<UniqueFd> OpenNetns(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + path, errno);
  return fd;
}

}  // namespace bulkhead::net
