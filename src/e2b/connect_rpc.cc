#include "e2b/connect_rpc.h"

#include <array>
#include <charconv>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/bounded_json.h"
#include "http/json_text.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

int RpcHttpStatus(std::string_view code) {
  static constexpr std::array<std::pair<std::string_view, int>, 16> kStatuses{{
      {"canceled", 499}, {"unknown", 500}, {"invalid_argument", 400}, {"deadline_exceeded", 504},
      {"not_found", 404}, {"already_exists", 409}, {"permission_denied", 403}, {"resource_exhausted", 429},
      {"failed_precondition", 400}, {"aborted", 409}, {"out_of_range", 400}, {"unimplemented", 501},
      {"internal", 500}, {"unavailable", 503}, {"data_loss", 500}, {"unauthenticated", 401},
  }};
  for (const auto& [name, status] : kStatuses) {
    if (name == code) return status;
  }
  return 500;
}

RpcError ToRpcError(const Error& error) {
  std::string code;
  switch (error.code) {
    case ErrorCode::kBadRequest:
    case ErrorCode::kInvalid:
    case ErrorCode::kTooLarge: code = "invalid_argument"; break;
    case ErrorCode::kUnauthorized: code = "unauthenticated"; break;
    case ErrorCode::kForbidden: code = "permission_denied"; break;
    case ErrorCode::kNotFound: code = "not_found"; break;
    case ErrorCode::kMethodNotAllowed: code = "unimplemented"; break;
    case ErrorCode::kConflict: code = error.detail_code == "exists" ? "already_exists" : "failed_precondition"; break;
    case ErrorCode::kTooMany:
    case ErrorCode::kDiskFull: code = "resource_exhausted"; break;
    case ErrorCode::kBadGateway:
    case ErrorCode::kUnavailable: code = "unavailable"; break;
    case ErrorCode::kInternal: code = "internal"; break;
  }
  return {code, error.message};
}

std::string Envelope(uint8_t flags, std::string_view payload) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(flags);
  const auto size = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((size >> (8 * (3 - i))) & 0xff);
  out.append(payload);
  return out;
}

Result<json> ParseRequestEnvelope(std::string_view body) {
  auto invalid = [](std::string message) { return MakeError(ErrorCode::kBadRequest, std::move(message)); };
  if (body.size() < 5) return invalid("the request is not a Connect envelope (under 5 bytes)");
  const auto flags = static_cast<uint8_t>(body[0]);
  uint32_t size = 0;
  for (int i = 1; i <= 4; ++i) size = (size << 8) | static_cast<uint8_t>(body[i]);
  if (flags & kEnvelopeCompressed) return invalid("compressed envelopes are not accepted (send identity)");
  if (flags != kEnvelopeMessage) return invalid("the request's first envelope is not a message");
  if (body.size() - 5 != size) return invalid("the request must be exactly one envelope");
  json message = ParseBoundedJson(body.substr(5));
  if (!message.is_object()) return invalid("the request message is not a JSON object");
  return message;
}

Result<std::optional<std::chrono::milliseconds>> ConnectTimeout(const api::RequestHeader& request) {
  const auto found = request.find("Connect-Timeout-Ms");
  if (found == request.end()) return std::optional<std::chrono::milliseconds>();
  const std::string_view text = api::FromBeast(found->value());
  uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || text.size() > 10) {
    return MakeError(ErrorCode::kBadRequest, "Connect-Timeout-Ms must be 1 to 10 digits");
  }
  return std::optional<std::chrono::milliseconds>(std::chrono::milliseconds(ms));
}

std::optional<std::chrono::seconds> KeepaliveInterval(const api::RequestHeader& request) {
  const auto found = request.find("Keepalive-Ping-Interval");
  if (found == request.end()) return std::nullopt;
  const std::string_view text = api::FromBeast(found->value());
  int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || end != text.data() + text.size() || seconds <= 0) return std::nullopt;
  return std::chrono::seconds(std::min<int64_t>(seconds, 3600));
}

asio::awaitable<std::optional<json>> ReadUnaryRequest(api::HttpExchange& exchange) {
  Result<std::string> body = co_await exchange.ReadBody(kMaxRequestMessage);
  if (!body.ok()) {
    co_await SendUnaryError(exchange, ToRpcError(body.error()));
    co_return std::nullopt;
  }
  // An empty body is the empty message.
  json message = json::object();
  if (!body->empty()) message = ParseBoundedJson(*body);
  if (!message.is_object()) {
    // Named, not a braced temporary in the co_await: g++ 12 destroys such a temporary twice.
    const RpcError invalid{"invalid_argument", "the request body is not a JSON object"};
    co_await SendUnaryError(exchange, invalid);
    co_return std::nullopt;
  }
  co_return message;
}

asio::awaitable<void> SendUnaryResponse(api::HttpExchange& exchange, const json& message) {
  co_await exchange.SendText(http::status::ok, "application/json", api::DumpJson(message));
}

asio::awaitable<void> SendUnaryError(api::HttpExchange& exchange, const RpcError& error) {
  const json body = {{"code", error.code}, {"message", error.message}};
  co_await exchange.SendText(static_cast<http::status>(RpcHttpStatus(error.code)), "application/json",
                             api::DumpJson(body));
}

struct ServerStream::State {
  explicit State(api::HttpExchange& e)
      : exchange(e), write_done(e.stream().get_executor()), keepalive_timer(e.stream().get_executor()) {
    // Waiters wait on a timer that never expires; a finished write cancels their waits.
    write_done.expires_at(asio::steady_timer::time_point::max());
  }
  api::HttpExchange& exchange;
  asio::steady_timer write_done;
  asio::steady_timer keepalive_timer;
  bool begun = false;
  bool writing = false;
  bool client_gone = false;
  bool finished = false;
  bool stopped = false;  // no more keepalives
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

namespace {

asio::awaitable<void> AwaitWrites(ServerStream::State& s) {
  while (s.writing) {
    boost::system::error_code ignored;
    co_await s.write_done.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
}

// One write at a time: the handler's messages and the keepalives share the response.
asio::awaitable<bool> WriteEnvelope(std::shared_ptr<ServerStream::State> s, std::string bytes, bool last) {
  co_await AwaitWrites(*s);
  if (s->client_gone || s->finished) co_return false;
  s->writing = true;
  bool ok = true;
  if (!s->begun) {
    s->begun = true;
    ok = co_await s->exchange.BeginChunked(http::status::ok, "application/connect+json");
  }
  if (ok) ok = co_await s->exchange.WriteChunk(bytes);
  if (ok && last) ok = co_await s->exchange.EndChunked();
  if (last) s->finished = true;
  if (!ok) s->client_gone = true;
  s->last_write = std::chrono::steady_clock::now();
  s->writing = false;
  s->write_done.cancel();
  co_return ok;
}

asio::awaitable<void> KeepaliveLoop(std::shared_ptr<ServerStream::State> s, std::chrono::seconds interval,
                                    std::string envelope) {
  while (!s->stopped && !s->finished && !s->client_gone) {
    s->keepalive_timer.expires_at(s->last_write + interval);
    boost::system::error_code ec;
    co_await s->keepalive_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (s->stopped || s->finished || s->client_gone) co_return;
    // Idle for a whole interval and nothing being written: the stream is quiet, say so.
    if (!s->writing && std::chrono::steady_clock::now() - s->last_write >= interval) {
      co_await WriteEnvelope(s, envelope, false);
    }
  }
}

}  // namespace

ServerStream::ServerStream(api::HttpExchange& exchange) : state_(std::make_shared<State>(exchange)) {}

ServerStream::~ServerStream() {
  state_->stopped = true;
  state_->keepalive_timer.cancel();
}

asio::awaitable<std::optional<json>> ServerStream::ReadRequest() {
  Result<std::string> body = co_await state_->exchange.ReadBody(kMaxRequestMessage + 5);
  if (!body.ok()) {
    co_await Finish(ToRpcError(body.error()));
    co_return std::nullopt;
  }
  Result<json> message = ParseRequestEnvelope(*body);
  if (!message.ok()) {
    co_await Finish(ToRpcError(message.error()));
    co_return std::nullopt;
  }
  co_return std::move(*message);
}

void ServerStream::StartKeepalive(std::chrono::seconds interval, json keepalive_message) {
  asio::co_spawn(state_->exchange.stream().get_executor(),
                 KeepaliveLoop(state_, interval, Envelope(kEnvelopeMessage, api::DumpJson(keepalive_message))),
                 asio::detached);
}

asio::awaitable<bool> ServerStream::Send(const json& message) {
  co_return co_await WriteEnvelope(state_, Envelope(kEnvelopeMessage, api::DumpJson(message)), false);
}

asio::awaitable<void> ServerStream::Finish(const std::optional<RpcError>& error) {
  state_->stopped = true;
  state_->keepalive_timer.cancel();
  json end = json::object();
  if (error) end["error"] = {{"code", error->code}, {"message", error->message}};
  co_await WriteEnvelope(state_, Envelope(kEnvelopeEndStream, api::DumpJson(end)), true);
}

asio::awaitable<void> ServerStream::Cut() {
  state_->stopped = true;
  state_->keepalive_timer.cancel();
  co_await AwaitWrites(*state_);
  state_->finished = true;
  state_->exchange.Abort();
}

bool ServerStream::finished() const { return state_->finished || state_->client_gone; }

}  // namespace bulkhead::e2b
