// An init listening on a unix socket on the host (bound there by its tier).
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "runtime/tier.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::runtime {
namespace asio = boost::asio;
namespace {

class UnixDialer : public InitDialer {
 public:
  explicit UnixDialer(std::string path) : path_(std::move(path)) {}

  asio::awaitable<Result<asio::local::stream_protocol::socket>> Dial(asio::any_io_executor executor) const override {
    asio::local::stream_protocol::socket socket(executor);
    boost::system::error_code ec;
    co_await socket.async_connect(asio::local::stream_protocol::endpoint(path_),
                                  asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      co_return MakeError(ErrorCode::kInternal, "lost the connection to the sandbox's init: " + ec.message(),
                          "sandbox_unreachable");
    }
    co_return std::move(socket);
  }

 private:
  std::string path_;
};

}  // namespace

std::shared_ptr<const InitDialer> UnixSocketDialer(std::string path) {
  return std::make_shared<UnixDialer>(std::move(path));
}

}  // namespace bulkhead::runtime
