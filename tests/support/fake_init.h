// The sandbox's side of a connection to init, for tests of the layers above the core: a
// coroutine on one end of a socket pair speaks ctl_protocol.h frames as the test scripts
// them, the daemon's code under test holds the other end. (tests/unit/init_client.h is the
// other way round: a client that drives the real bulkhead-init.)
#pragma once
#include <cstdint>
#include <utility>  // asio/awaitable.hpp needs it and does not include it
#include <functional>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <nlohmann/json.hpp>

namespace bulkhead::testing {

using LocalSocket = boost::asio::local::stream_protocol::socket;

// One frame, as its bytes on the wire.
std::string Frame(uint8_t type, std::string_view payload);
// A kExit frame whose payload is `fields` (exit_code, signal, timed_out, duration_ms).
std::string ExitFrame(const nlohmann::json& fields);

struct ReceivedFrame {
  uint8_t type = 0;  // 0: the daemon closed the connection (or sent a frame of a bad length)
  std::string payload;
};

// Writes `bytes`; a daemon that hung up is no error here (scripts go on to their end).
boost::asio::awaitable<void> Send(LocalSocket& socket, const std::string& bytes);
// The daemon's next frame.
boost::asio::awaitable<ReceivedFrame> Receive(LocalSocket& socket);

// An init that answers the first frame of the connection, whatever it asked, with `answer`:
// what a hijacked init could send.
boost::asio::awaitable<void> AnswerFirstFrame(LocalSocket socket, std::string answer);

// What init does on its end of one connection.
using InitScript = std::function<boost::asio::awaitable<void>(LocalSocket socket)>;
// Runs `init` on one end of a new socket pair and returns the other end, the daemon's.
LocalSocket SpawnInit(const boost::asio::any_io_executor& executor, InitScript init);

}  // namespace bulkhead::testing
