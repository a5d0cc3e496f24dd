// An init listening on a vsock port of a guest, reached through the host unix socket of a
// vsock device in Firecracker's model (Firecracker's own, vhost-device-vsock's uds mode): the
// host connects, writes "CONNECT <port>\n", reads "OK <host port>\n", and the same stream
// then reaches the guest's listener.
#include <sys/socket.h>

#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

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
    co_await asio::async_write(socket, asio::buffer(request), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Unreachable(ec.message());
    // One byte at a time: what follows the newline is init's and stays in the socket.
    std::string answer;
    char byte = 0;
    while (answer.size() < kMaxAnswer) {
      co_await asio::async_read(socket, asio::buffer(&byte, 1), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return Unreachable("the guest's vsock port " + std::to_string(port_) + " refused: " + ec.message());
      if (byte == '\n') break;
      answer.push_back(byte);
    }
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

std::shared_ptr<const InitDialer> VsockDeviceDialer(std::string path, uint32_t port, uid_t device_uid) {
  return std::make_shared<VsockDialer>(std::move(path), port, device_uid);
}

}  // namespace bulkhead::runtime
