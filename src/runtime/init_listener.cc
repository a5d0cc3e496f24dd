#include "runtime/init_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::runtime {
namespace asio = boost::asio;
namespace {

Error Unreachable(const std::string& why) {
  return MakeError(ErrorCode::kInternal, "lost the connection to the sandbox's init: " + why, "sandbox_unreachable");
}

}  // namespace

std::shared_ptr<InitListener> InitListener::Listen(const std::string& path, uid_t peer_uid) {
  std::shared_ptr<InitListener> listener(new InitListener(path, peer_uid));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    listener->broken_ = Unreachable("socket path too long: " + path);
    return listener;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  ::unlink(path.c_str());
  // Bound owned by root and closed to others (the daemon's umask, 077, or any that leaves
  // others no write), then handed to the sandbox's uid: nobody else reaches it in between. The
  // umask is the whole process's: changing it here, even for a moment, once made a directory
  // another thread was making unsearchable (a microvm's, whose vsock device then could not bind).
  const bool bound = fd && ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  if (!bound || ::chmod(path.c_str(), 0600) != 0 || ::chown(path.c_str(), peer_uid, peer_uid) != 0 ||
      ::listen(fd.get(), 64) != 0) {
    listener->broken_ = Unreachable("listen at " + path + ": " + std::strerror(errno));
    return listener;
  }
  listener->fd_ = std::move(fd);
  return listener;
}

Result<UniqueFd> InitListener::TakeWaiting() const {
  if (broken_) return *broken_;
  for (;;) {
    UniqueFd connection(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!connection) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return UniqueFd();
      return Unreachable(std::string("accept: ") + std::strerror(errno));
    }
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != peer_uid_) {
      spdlog::warn("{}: dropped a connection from uid {} (not the sandbox's)", path_, peer.uid);
      continue;
    }
    // Init never speaks first: a connection with something to read was closed by init while
    // it waited (gVisor restored the sandbox from a checkpoint, which cuts host connections).
    pollfd closed{.fd = connection.get(), .events = POLLIN | POLLRDHUP, .revents = 0};
    if (::poll(&closed, 1, 0) == 0) return connection;
  }
}

bool InitListener::WaitForInit(std::chrono::milliseconds timeout) const {
  if (broken_) return false;
  pollfd waiting{.fd = fd_.get(), .events = POLLIN, .revents = 0};
  return ::poll(&waiting, 1, static_cast<int>(timeout.count())) == 1;
}

asio::awaitable<Result<asio::local::stream_protocol::socket>> InitListener::Dial(
    asio::any_io_executor executor) const {
  // Init keeps connections waiting, so the first look mostly finds one. Else a short wait,
  // growing: init dials another as soon as it sees a waiting one taken.
  const auto deadline = std::chrono::steady_clock::now() + kDialWait;
  for (int look = 0;; ++look) {
    auto taken = TakeWaiting();
    if (!taken) co_return taken.error();
    if (*taken) {
      asio::local::stream_protocol::socket socket(executor);
      boost::system::error_code ec;
      socket.assign(asio::local::stream_protocol(), taken->release(), ec);
      if (ec) co_return Unreachable(ec.message());
      co_return std::move(socket);
    }
    if (std::chrono::steady_clock::now() >= deadline)
      co_return Unreachable("its init has not dialed the daemon for " + std::to_string(kDialWait.count()) + " s");
    asio::steady_timer pause(executor, std::chrono::milliseconds(look < 10 ? 1 : 10));
    co_await pause.async_wait(asio::use_awaitable);
  }
}

}  // namespace bulkhead::runtime
