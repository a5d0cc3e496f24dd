// A message on a unix socket with a descriptor attached (SCM_RIGHTS): QMP's getfd and add-fd,
// a pty master to an OCI runtime caller's console socket.
#pragma once
#include <sys/types.h>

#include <string_view>

namespace bulkhead {

// One sendmsg of `data` with `fd` attached (-1: none), MSG_NOSIGNAL; answers sendmsg's result.
ssize_t SendWithFd(int socket, std::string_view data, int fd);

}  // namespace bulkhead
