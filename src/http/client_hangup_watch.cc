#include "http/client_hangup_watch.h"

#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

namespace asio = boost::asio;

ClientHangupWatch::ClientHangupWatch(Socket& socket, std::function<void()> on_hangup)
    : socket_(socket), state_(std::make_shared<State>()) {
  state_->on_hangup = std::move(on_hangup);
  asio::co_spawn(socket.get_executor(), Watch(socket, state_), asio::detached);
}

ClientHangupWatch::~ClientHangupWatch() {
  state_->active = false;
  boost::system::error_code ignored;
  socket_.cancel(ignored);  // the pending wait completes as aborted and finds active=false
}

asio::awaitable<void> ClientHangupWatch::Watch(Socket& socket, std::shared_ptr<State> state) {
  for (;;) {
    boost::system::error_code ec;
    co_await socket.async_wait(asio::socket_base::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (!state->active) co_return;  // the watch ended; `socket` may be gone
    if (!ec) {
      char byte;
      const ssize_t n = recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      // Bytes waiting are the client's next (pipelined) request: it is still there.
      if (n > 0) co_return;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    }
    state->client_gone = true;
    state->on_hangup();
    co_return;
  }
}

}  // namespace bulkhead::api
