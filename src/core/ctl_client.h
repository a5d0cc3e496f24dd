// A raw connection to a sandbox's init speaking ctl_protocol.h: send frames, receive frames.
// One Send and one Receive may be in flight at the same time (asio allows one read and one
// write outstanding per socket); callers serialize their own Sends and Receives.
// Lives on an io_context; every call must come from its executor.
#pragma once
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/output_budget.h"
#include "runtime/tier.h"

namespace bulkhead::core {

class CtlClient {
 public:
  struct Frame {
    uint8_t type = 0;
    std::string payload;
  };

  explicit CtlClient(boost::asio::local::stream_protocol::socket socket) : socket_(std::move(socket)) {}
  ~CtlClient() { Close(); }
  CtlClient(const CtlClient&) = delete;
  CtlClient& operator=(const CtlClient&) = delete;

  static boost::asio::awaitable<Result<std::unique_ptr<CtlClient>>> Connect(
      boost::asio::any_io_executor executor, std::shared_ptr<const runtime::InitDialer> init);

  // Sends one frame; payloads over ctl::kMaxFrame - 1 bytes are an error (split them).
  boost::asio::awaitable<Status> Send(uint8_t type, std::string_view payload);
  // The next frame; an Error ("sandbox_unreachable") once the connection is lost or closed.
  boost::asio::awaitable<Result<Frame>> Receive();
  // Shuts the connection down both ways; pending operations complete with an error.
  void Close();
  // Output frames (kStdout, kStderr) are received no faster than this budget allows.
  void PaceWith(std::shared_ptr<OutputBudget> budget) { budget_ = std::move(budget); }

 private:
  boost::asio::local::stream_protocol::socket socket_;
  std::shared_ptr<OutputBudget> budget_;
};

// Everything init sends is untrusted: sandbox code that got hold of init could send anything.

// A frame init should not have sent, or sent malformed: 500 sandbox_protocol_error.
Error InitProtocolError(std::string_view what);
// The JSON object a `frame` ("kStarted") from init carries (nested at most kMaxJsonDepth:
// bounded_json.h), else an InitProtocolError.
Result<nlohmann::json> ParseInitObject(std::string_view payload, std::string_view frame);

// The "pid" of an object from init: an integer 1..INT32_MAX, else nullopt.
std::optional<int> InitPid(const nlohmann::json& object);

// One request on a new connection and init's answer (its first frame, or with `until` the
// first frame of that type; kError as an Error), for threads outside any io_context (the
// lifecycle paths): runs an io_context of its own, and gives up after `timeout`.
Result<CtlClient::Frame> CallInitBlocking(const runtime::InitDialer& init, uint8_t type, std::string_view payload,
                                          std::chrono::milliseconds timeout, uint8_t until = 0);

// An init kError payload as an Error ("not_found" -> kNotFound, "invalid_argument" -> kInvalid,
// else kInternal).
Error ErrorFromInit(std::string_view payload);

}  // namespace bulkhead::core
