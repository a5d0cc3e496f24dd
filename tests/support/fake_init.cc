#include "support/fake_init.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "common/ctl_protocol.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::testing {

namespace asio = boost::asio;

std::string Frame(uint8_t type, std::string_view payload) {
  std::string out(ctl::kHeaderSize, '\0');
  ctl::EncodeHeader(reinterpret_cast<uint8_t*>(out.data()), type, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

std::string ExitFrame(const nlohmann::json& fields) { return Frame(ctl::kExit, fields.dump()); }

asio::awaitable<void> Send(LocalSocket& socket, const std::string& bytes) {
  boost::system::error_code ec;
  co_await asio::async_write(socket, asio::buffer(bytes), asio::redirect_error(asio::use_awaitable, ec));
}

asio::awaitable<ReceivedFrame> Receive(LocalSocket& socket) {
  uint8_t header[ctl::kHeaderSize];
  boost::system::error_code ec;
  co_await asio::async_read(socket, asio::buffer(header), asio::redirect_error(asio::use_awaitable, ec));
  const int64_t length = ec ? -1 : ctl::DecodePayloadLength(header);
  if (length < 0) co_return ReceivedFrame{};
  ReceivedFrame frame{header[4], std::string(static_cast<size_t>(length), '\0')};
  co_await asio::async_read(socket, asio::buffer(frame.payload), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return ReceivedFrame{};
  co_return frame;
}

asio::awaitable<void> AnswerFirstFrame(LocalSocket socket, std::string answer) {
  const ReceivedFrame request = co_await Receive(socket);
  if (request.type == 0) co_return;
  co_await Send(socket, answer);
}

namespace {

// Holds the script for as long as it runs (a coroutine lambda's captures live in the lambda).
asio::awaitable<void> Run(InitScript init, LocalSocket socket) { co_await init(std::move(socket)); }

}  // namespace

LocalSocket SpawnInit(const asio::any_io_executor& executor, InitScript init) {
  LocalSocket daemon_end(executor), init_end(executor);
  asio::local::connect_pair(daemon_end, init_end);
  asio::co_spawn(executor, Run(std::move(init), std::move(init_end)), asio::detached);
  return daemon_end;
}

}  // namespace bulkhead::testing
