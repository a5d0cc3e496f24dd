// Connect RPC (connectrpc.com/docs/protocol) with the JSON codec, as the e2b SDKs speak it to
// envd: unary calls are a bare JSON body answered with one, server-streaming calls are
// enveloped (1 flag byte, 4-byte big-endian length, JSON) both ways and end with an
// end-stream envelope that carries the error, if any, under HTTP 200.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "http/http_exchange.h"

namespace bulkhead::e2b {

// A Connect error: `code` is one of Connect's names ("not_found", "invalid_argument", ...).
struct RpcError {
  std::string code;
  std::string message;
};

// Connect's HTTP status for an error code (unknown codes: 500).
int RpcHttpStatus(std::string_view code);
// The Connect error for a bulkhead Error (not_found, invalid_argument, permission_denied, ...).
RpcError ToRpcError(const Error& error);
// What envd's streams end with when their Connect-Timeout-Ms passes (Go's context error).
inline RpcError DeadlineExceeded() { return {"deadline_exceeded", "context deadline exceeded"}; }

constexpr uint8_t kEnvelopeMessage = 0x00;
constexpr uint8_t kEnvelopeCompressed = 0x01;
constexpr uint8_t kEnvelopeEndStream = 0x02;
// The largest request message accepted (envd's requests are small: a command line, a path).
constexpr uint64_t kMaxRequestMessage = 4 * 1024 * 1024;

std::string Envelope(uint8_t flags, std::string_view payload);
// The JSON object in the one message envelope of a server-streaming request body.
Result<nlohmann::json> ParseRequestEnvelope(std::string_view body);

// Connect-Timeout-Ms: nullopt when absent; an error when not 1..10 digits.
Result<std::optional<std::chrono::milliseconds>> ConnectTimeout(const api::RequestHeader& request);
// Keepalive-Ping-Interval (seconds, as the e2b SDKs send it): nullopt when absent or not a
// positive number.
std::optional<std::chrono::seconds> KeepaliveInterval(const api::RequestHeader& request);

// Unary calls. ReadUnaryRequest answers a bad body itself (the result is then empty).
boost::asio::awaitable<std::optional<nlohmann::json>> ReadUnaryRequest(api::HttpExchange& exchange);
boost::asio::awaitable<void> SendUnaryResponse(api::HttpExchange& exchange, const nlohmann::json& message);
boost::asio::awaitable<void> SendUnaryError(api::HttpExchange& exchange, const RpcError& error);

// The response of a server-streaming call. Send writes one message envelope (the response
// header goes out with the first); Finish writes the end-stream envelope, with the error if
// any, and ends the response. With a keepalive, `keepalive_message` is sent whenever nothing
// else was sent for `interval`. Every call must come from the exchange's executor (strand).
class ServerStream {
 public:
  explicit ServerStream(api::HttpExchange& exchange);
  ~ServerStream();  // stops the keepalive
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  // Reads the request's one envelope. On failure the stream is finished with the error and
  // the result is empty.
  boost::asio::awaitable<std::optional<nlohmann::json>> ReadRequest();

  void StartKeepalive(std::chrono::seconds interval, nlohmann::json keepalive_message);
  // False once the client is gone.
  boost::asio::awaitable<bool> Send(const nlohmann::json& message);
  boost::asio::awaitable<void> Finish(const std::optional<RpcError>& error = std::nullopt);
  // Ends the stream without the end-stream envelope, resetting the connection: what a client
  // sees of a proxy whose upstream went away (the SDKs then probe /health). Waits for a write
  // still under way.
  boost::asio::awaitable<void> Cut();
  bool finished() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace bulkhead::e2b
