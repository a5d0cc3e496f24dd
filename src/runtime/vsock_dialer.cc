// An init listening on a vsock port of a guest, reached through the host unix socket of a
// vsock device in Firecracker's model (Firecracker's own, vhost-device-vsock's uds mode): the
// host connects, writes "CONNECT <port>\n", reads "OK <host port>\n", and the same stream
// then reaches the guest's listener.
#include "runtime/vsock_dialer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it
#include <vector>

#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "runtime/tier.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::runtime {
namespace asio = boost::asio;
namespace {

// "OK " and a port number, and the newline: anything longer is not the device's answer.
constexpr size_t kMaxAnswer = 32;

// How long a connection given up on is held for its answer: the guest of a busy host under
// TCG answers within seconds.
constexpr auto kHeldFor = std::chrono::minutes(1);

// The connections given up on, and the thread that waits for their answers (vsock_dialer.h).
class Unanswered {
 public:
  static Unanswered& Get() {
    static Unanswered* unanswered = new Unanswered;  // never destroyed: its thread lives as long as the process
    return *unanswered;
  }

  void Hold(UniqueFd connection) {
    std::lock_guard lock(mu_);
    held_.push_back({std::move(connection), std::chrono::steady_clock::now() + kHeldFor});
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
  }

 private:
  struct Held {
    UniqueFd connection;
    std::chrono::steady_clock::time_point until;
  };

  Unanswered() : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) { std::thread([this] { Run(); }).detach(); }

  void Run() {
    while (true) {
      std::vector<pollfd> watched{{wake_.get(), POLLIN, 0}};
      {
        std::lock_guard lock(mu_);
        for (const Held& held : held_) watched.push_back({held.connection.get(), POLLIN, 0});
      }
      // (with nothing held it sleeps until the next connection comes)
      (void)::poll(watched.data(), watched.size(), watched.size() == 1 ? -1 : 1000);
      uint64_t woken = 0;
      (void)!::read(wake_.get(), &woken, sizeof woken);
      std::lock_guard lock(mu_);
      const auto now = std::chrono::steady_clock::now();
      for (size_t i = 1; i < watched.size(); i++) {
        auto it = std::find_if(held_.begin(), held_.end(),
                               [&](const Held& held) { return held.connection.get() == watched[i].fd; });
        if (it == held_.end()) continue;
        bool done = now > it->until;
        if (watched[i].revents != 0) {
          // The answer's line (or the end): what follows it, if anything, is dropped with the connection.
          char answer[64];
          const ssize_t got = ::recv(watched[i].fd, answer, sizeof answer, MSG_DONTWAIT);
          done = done || got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR) ||
                 (got > 0 && std::memchr(answer, '\n', static_cast<size_t>(got)) != nullptr);
        }
        if (done) held_.erase(it);
      }
    }
  }

  std::mutex mu_;
  std::vector<Held> held_;
  UniqueFd wake_;
};

// A dial's connection from its CONNECT to the answer: given up on before the answer came,
// it is held (Unanswered) through a duplicate of its descriptor, whatever closes the socket.
class Pending {
 public:
  explicit Pending(int socket) : duplicate_(::fcntl(socket, F_DUPFD_CLOEXEC, 0)) {}
  ~Pending() {
    if (duplicate_) HoldUntilAnswered(std::move(duplicate_));
  }
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  // The answer came, or the device ended the connection: closing it is safe.
  void Settled() { duplicate_.reset(); }

 private:
  UniqueFd duplicate_;
};

Error Unreachable(const std::string& why) {
  return MakeError(ErrorCode::kInternal, "lost the connection to the sandbox's init: " + why, "sandbox_unreachable");
}

class VsockDialer : public InitDialer {
 public:
  VsockDialer(std::string path, uint32_t port, uid_t device_uid)
      : path_(std::move(path)), port_(port), device_uid_(device_uid) {}

  asio::awaitable<Result<asio::local::stream_protocol::socket>> Dial(asio::any_io_executor executor) const override {
    asio::local::stream_protocol::socket socket(executor);
    boost::system::error_code ec;
    co_await socket.async_connect(asio::local::stream_protocol::endpoint(path_),
                                  asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Unreachable(ec.message());
    if (device_uid_ != 0) {
      ucred peer{};
      socklen_t length = sizeof peer;
      if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 ||
          peer.uid != device_uid_)
        co_return Unreachable("the vsock device socket " + path_ + " is not served by the sandbox's device");
    }
    const std::string request = "CONNECT " + std::to_string(port_) + "\n";
    Pending pending(socket.native_handle());
    co_await asio::async_write(socket, asio::buffer(request), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      pending.Settled();
      co_return Unreachable(ec.message());
    }
    // One byte at a time: what follows the newline is init's and stays in the socket.
    std::string answer;
    char byte = 0;
    while (answer.size() < kMaxAnswer) {
      co_await asio::async_read(socket, asio::buffer(&byte, 1), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec != asio::error::operation_aborted) pending.Settled();  // (the device ended it)
        co_return Unreachable("the guest's vsock port " + std::to_string(port_) + " refused: " + ec.message());
      }
      if (byte == '\n') break;
      answer.push_back(byte);
    }
    pending.Settled();
    if (byte != '\n' || answer.rfind("OK ", 0) != 0)
      co_return Unreachable("the vsock device answered \"" + answer + "\" to CONNECT");
    co_return std::move(socket);
  }

 private:
  std::string path_;
  uint32_t port_;
  uid_t device_uid_;
};

}  // namespace

void HoldUntilAnswered(UniqueFd connection) { Unanswered::Get().Hold(std::move(connection)); }

Status WaitForGuestPort(const std::string& path, uint32_t port, const std::function<bool()>& alive,
                        std::chrono::steady_clock::time_point deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return MakeError(ErrorCode::kInternal, "socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const std::string request = "CONNECT " + std::to_string(port) + "\n";
  while (true) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return SystemError("socket", errno);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      // The answer, or the end (the guest refused: nothing listens yet), however long it takes.
      while (true) {
        pollfd p{fd.get(), POLLIN, 0};
        if (::poll(&p, 1, 100) == 1) break;
        if (!alive() || std::chrono::steady_clock::now() > deadline) {
          HoldUntilAnswered(std::move(fd));
          return MakeError(ErrorCode::kInternal, alive() ? "the guest's init did not serve in time" : "the guest stopped");
        }
      }
      char answer[32] = {};
      if (::recv(fd.get(), answer, sizeof answer - 1, 0) > 2 && std::strncmp(answer, "OK", 2) == 0) return {};
    }
    if (!alive()) return MakeError(ErrorCode::kInternal, "the guest stopped");
    if (std::chrono::steady_clock::now() > deadline)
      return MakeError(ErrorCode::kInternal, "the guest's init did not serve in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::shared_ptr<const InitDialer> VsockDeviceDialer(std::string path, uint32_t port, uid_t device_uid) {
  return std::make_shared<VsockDialer>(std::move(path), port, device_uid);
}

}  // namespace bulkhead::runtime
