// Notices a client that hangs up while its request runs, even when nothing is being
// written (a long silent command), so the work is cancelled instead of running on.
// Everything runs on the connection's strand; the destructor stops the watch.
#pragma once
#include <functional>
#include <memory>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>

namespace bulkhead::api {

class ClientHangupWatch {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;

  ClientHangupWatch(Socket& socket, std::function<void()> on_hangup);
  ~ClientHangupWatch();
  ClientHangupWatch(const ClientHangupWatch&) = delete;
  ClientHangupWatch& operator=(const ClientHangupWatch&) = delete;

  bool client_gone() const { return state_->client_gone; }

 private:
  struct State {
    bool active = true;
    bool client_gone = false;
    std::function<void()> on_hangup;
  };

  static boost::asio::awaitable<void> Watch(Socket& socket, std::shared_ptr<State> state);

  Socket& socket_;
  std::shared_ptr<State> state_;
};

}  // namespace bulkhead::api
