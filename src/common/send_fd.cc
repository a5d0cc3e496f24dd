#include "common/send_fd.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

namespace bulkhead {

ssize_t SendWithFd(int socket, std::string_view data, int fd) {
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  }
  return ::sendmsg(socket, &message, MSG_NOSIGNAL);
}

}  // namespace bulkhead
