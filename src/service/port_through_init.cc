#include "service/port_through_init.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"
#include "core/file_operation.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

constexpr size_t kPieceBytes = 64 * 1024;

// The worker and the daemon's end of the pair, shared by the two directions.
struct Pump {
  std::unique_ptr<core::FileOperation> worker;
  net::StreamSocket end;
};

// The application's bytes (the worker's stdout) to the pair; the worker's end closes it.
asio::awaitable<void> FromApp(std::shared_ptr<Pump> pump, std::string first) {
  error_code ec;
  std::string piece = std::move(first);
  while (true) {
    if (!piece.empty()) {
      co_await asio::async_write(pump->end, asio::buffer(piece), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    Result<std::string> next = co_await pump->worker->Read();
    if (!next.ok() || next->empty()) break;
    piece = std::move(next.value());
  }
  pump->end.shutdown(asio::socket_base::shutdown_send, ec);
  if (ec) pump->worker->Cancel();
}

// The caller's bytes (from the pair) to the worker's stdin; their end is its end.
asio::awaitable<void> ToApp(std::shared_ptr<Pump> pump) {
  std::string buffer(kPieceBytes, '\0');
  while (true) {
    error_code ec;
    const size_t n = co_await pump->end.async_read_some(asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      // The caller shut down its sending side only (POLLHUP not set): a half-close reaches
      // the application. Else the caller went away: the worker goes too.
      pollfd hangup{pump->end.native_handle(), POLLOUT, 0};
      if (ec == asio::error::eof && ::poll(&hangup, 1, 0) >= 0 && !(hangup.revents & POLLHUP)) {
        Status closed = co_await pump->worker->CloseInput();
        (void)closed;
      } else {
        pump->worker->Cancel();
      }
      co_return;
    }
    Status sent = co_await pump->worker->Write(std::string_view(buffer.data(), n));
    if (!sent.ok()) co_return;  // the worker ended: FromApp closes the pair
  }
}

}  // namespace

asio::awaitable<Result<net::StreamSocket>> ConnectThroughInit(core::SandboxManager& manager, const std::string& id,
                                                              uint16_t port) {
  const auto executor = co_await asio::this_coro::executor;
  Result<core::InitConnection> init = co_await manager.ConnectInit(executor, id);
  if (!init.ok()) co_return init.error();
  const nlohmann::json op = {{"op", "connect"}, {"port", port}};
  Result<std::unique_ptr<core::FileOperation>> worker =
      co_await core::FileOperation::StartDuplex(std::move(init.value()), op, "root");
  if (!worker.ok()) co_return worker.error();
  Result<std::string> first = co_await (*worker)->Read();
  if (!first.ok()) co_return first.error();
  if (first->empty() || (*first)[0] != ctl::kConnectReady)
    co_return MakeError(ErrorCode::kBadGateway, "the sandbox's relay to port " + std::to_string(port) + " did not start");

  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0)
    co_return SystemError("socketpair for the port relay", errno);
  net::StreamSocket caller(executor), end(executor);
  error_code ec;
  caller.assign(asio::generic::stream_protocol(AF_UNIX, 0), pair[0], ec);
  if (ec) {
    ::close(pair[0]);
    ::close(pair[1]);
    co_return MakeError(ErrorCode::kInternal, "port relay socket: " + ec.message());
  }
  end.assign(asio::generic::stream_protocol(AF_UNIX, 0), pair[1], ec);
  if (ec) {
    ::close(pair[1]);
    co_return MakeError(ErrorCode::kInternal, "port relay socket: " + ec.message());
  }
  auto pump = std::make_shared<Pump>(Pump{std::move(worker.value()), std::move(end)});
  asio::co_spawn(executor, FromApp(pump, first->substr(1)), asio::detached);
  asio::co_spawn(executor, ToApp(pump), asio::detached);
  co_return std::move(caller);
}

}  // namespace bulkhead::api
