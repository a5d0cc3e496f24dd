#include "net/listener.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::net {

namespace asio = boost::asio;
using boost::system::error_code;

Result<std::shared_ptr<Acceptor>> AdoptListener(const asio::any_io_executor& executor, UniqueFd fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return SystemError("getsockname of a sandbox listener", errno);
  }
  auto acceptor = std::make_shared<Acceptor>(executor);
  error_code ec;
  acceptor->assign(asio::generic::stream_protocol(address.ss_family, IPPROTO_TCP), fd.get(), ec);
  if (ec) return MakeError(ErrorCode::kInternal, "adopt a sandbox listener: " + ec.message());
  fd.release();
  int listening = 0;
  socklen_t size = sizeof(listening);
  getsockopt(acceptor->native_handle(), SOL_SOCKET, SO_ACCEPTCONN, &listening, &size);
  if (!listening) {
    acceptor->listen(SOMAXCONN, ec);
    if (ec) return MakeError(ErrorCode::kInternal, "listen on a sandbox listener: " + ec.message());
  }
  return acceptor;
}

asio::awaitable<void> AcceptLoop(std::shared_ptr<Acceptor> acceptor, asio::io_context& io,
                                 std::function<void(StreamSocket)> serve) {
  for (;;) {
    StreamSocket socket(asio::make_strand(io));
    error_code ec;
    co_await acceptor->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (!acceptor->is_open() || ec == asio::error::operation_aborted) co_return;
    if (!ec) {
      serve(std::move(socket));
      continue;
    }
    if (ec == asio::error::connection_aborted) continue;
    // Out of descriptors or memory: wait a little instead of spinning on the same error.
    spdlog::warn("egress proxy: accept: {}", ec.message());
    asio::steady_timer pause(acceptor->get_executor(), std::chrono::milliseconds(100));
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace bulkhead::net
