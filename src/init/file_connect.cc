// connect (ctl_protocol.h, "File operations"): the port proxy's way to a sandbox whose
// loopback belongs to a kernel of its own (the microvm tier). The worker connects to the
// port on the sandbox's loopback, 127.0.0.1 and then [::1], writes ctl::kConnectReady to stdout, and
// then carries bytes both ways: stdin to the connection (its end half-closes the connection),
// the connection to stdout. It ends when the application closes or resets the connection.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/ctl_protocol.h"
#include "common/unique_fd.h"
#include "init/file_worker.h"

namespace bulkhead::init {
namespace {

constexpr size_t kPieceBytes = 64 * 1024;

// A socket connected to the loopback port, else none and `err` the errno of the failure:
// ECONNREFUSED if either address refused (the other may not exist: IPv6 off).
UniqueFd ConnectLoopback(int port, int& err) {
  err = 0;
  for (const int family : {AF_INET, AF_INET6}) {
    UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
      if (err != ECONNREFUSED) err = errno;
      continue;
    }
    sockaddr_storage address{};
    socklen_t size = 0;
    if (family == AF_INET) {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      size = sizeof *v4;
    } else {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      v6->sin6_addr = in6addr_loopback;
      size = sizeof *v6;
    }
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), size) == 0) return fd;
    if (err != ECONNREFUSED) err = errno;
  }
  return UniqueFd();
}

}  // namespace

Status ConnectOp(const FileOpArgs& args) {
  auto port = args.Int("port", 0, 1, 65535);
  if (!port.ok()) return port.error();
  int err = 0;
  UniqueFd app = ConnectLoopback(*port, err);
  if (!app) {
    const std::string what = "connect to port " + std::to_string(*port) + ": " + std::strerror(err);
    return FileError(err == ECONNREFUSED ? "not_found" : "internal", what);
  }
  BH_TRY(WriteAll(1, std::string_view(&ctl::kConnectReady, 1)));
  // The client's bytes the application has not taken yet. Sent only as far as it takes them
  // at once: blocked on an application that is itself blocked sending (an echo of more than
  // the sockets hold), the worker would stop reading its answer, and both would wait for good.
  std::string pending;
  bool client_done = false;
  char buffer[kPieceBytes];
  while (true) {
    pollfd fds[2] = {{client_done || !pending.empty() ? -1 : 0, POLLIN, 0},
                     {app.get(), short(POLLIN | (pending.empty() ? 0 : POLLOUT)), 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "poll", "the connection");
    }
    if (fds[0].revents != 0) {
      ssize_t n = ::read(0, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        pending.assign(buffer, size_t(n));
      } else {  // the client is done sending (or init went away): half-close
        ::shutdown(app.get(), SHUT_WR);
        client_done = true;
      }
    }
    if (!pending.empty() && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      ssize_t n = ::send(app.get(), pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EINTR && errno != EAGAIN) return ErrnoError(errno, "send to", "the application");
      if (n > 0) pending.erase(0, size_t(n));
    }
    if ((fds[1].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      ssize_t n = ::recv(app.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return {};  // closed or reset by the application
      BH_TRY(WriteAll(1, std::string_view(buffer, size_t(n))));
    }
  }
}

}  // namespace bulkhead::init
