// One request and its response on a connection: reading the body within limits and
// writing a response (whole or chunked). Every read and write has a deadline, so a stuck
// or malicious client cannot hold a connection forever.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::api {

namespace beast = boost::beast;
namespace http = boost::beast::http;

// TCP and unix socket connections look alike above the accept.
using HttpStream = beast::basic_stream<boost::asio::generic::stream_protocol>;
using RequestHeader = http::request<http::empty_body>;

// Beast 1.74 speaks boost::string_view; these cross over to std::string_view.
inline beast::string_view ToBeast(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view FromBeast(beast::string_view s) { return {s.data(), s.size()}; }

constexpr std::chrono::seconds kReadTimeout{30};   // for the headers, or a whole JSON body
constexpr std::chrono::seconds kWriteTimeout{60};  // for each write of a response
constexpr uint64_t kMaxJsonBody = 1024 * 1024;
// An exec body carries up to 16 MiB of stdin, base64-encoded (4/3) inside JSON.
constexpr uint64_t kMaxExecBody = 24 * 1024 * 1024;
// The piece size of a streamed request body (ReadBodyStreamed).
constexpr size_t kBodyPieceBytes = 256 * 1024;

class HttpExchange {
 public:
  // `parser` has read the request's header; the body, if any, is still unread.
  // While `server_stopping` is set, responses say "Connection: close".
  // `client_address`: the client's IP address ("" for a unix socket client).
  HttpExchange(HttpStream& stream, beast::flat_buffer& buffer,
               http::request_parser<http::empty_body>& parser, const std::atomic<bool>& server_stopping,
               std::string client_address);

  const RequestHeader& request() const { return request_; }
  // The client's IP address, "" over the unix socket. (Over TLS, the stream is the daemon's
  // end of its relay, common/tls_relay.h: the address is the TCP peer's.)
  const std::string& client_address() const { return client_address_; }
  HttpStream& stream() { return stream_; }

  // Reads the whole body into memory; 413 if it is (or announces to be) over `limit`.
  boost::asio::awaitable<Result<std::string>> ReadBody(uint64_t limit);
  // Reads the body as a JSON object. On failure (413 over `limit`, 400 malformed) the error
  // is already answered and the result is empty.
  boost::asio::awaitable<std::optional<nlohmann::json>> ReadJsonObject(uint64_t limit);
  // Streams the body into `fd`, never holding more than a small buffer; 413 over `limit`.
  // Each read has its own deadline, so a large upload may take as long as it keeps moving.
  // Answers the number of bytes written.
  boost::asio::awaitable<Result<uint64_t>> ReadBodyToFile(int fd, uint64_t limit);
  // Streams the body (Content-Length or chunked) to `sink` in pieces of at most
  // kBodyPieceBytes, reading on only once the sink's call completed: one buffer of memory,
  // and a slow sink slows the client down. 413 over `limit`. If the sink fails, reading
  // stops there and its error is answered; the unread rest means the connection closes
  // after the response. Answers the number of bytes handed to the sink.
  // With `hand_on_arrivals`, each piece goes to the sink as soon as it arrived rather than
  // once it is full (a proxy must not hold back the bytes of a slow stream).
  using BodySink = std::function<boost::asio::awaitable<Status>(std::string_view piece)>;
  boost::asio::awaitable<Result<uint64_t>> ReadBodyStreamed(uint64_t limit, const BodySink& sink,
                                                            bool hand_on_arrivals = false);

  // Sends "100 Continue" if the client waits for it before sending the body; once (the body
  // reads call it too). For a handler that answers it before others may write.
  boost::asio::awaitable<Status> AnswerExpectContinue();

  // Bytes read past the request's header and body: the first bytes of an upgraded
  // protocol, which a handler taking the connection over must pass on.
  beast::flat_buffer& buffer() { return buffer_; }

  boost::asio::awaitable<void> SendJson(http::status status, const nlohmann::json& body);
  boost::asio::awaitable<void> SendError(const Error& error);
  boost::asio::awaitable<void> SendText(http::status status, std::string_view content_type,
                                        std::string body);
  boost::asio::awaitable<void> SendNoContent();

  // A chunked response: the header, then one chunk per call (a write finishes before the
  // next starts: backpressure), then the last chunk. False once the client is gone.
  boost::asio::awaitable<bool> BeginChunked(http::status status, std::string_view content_type);
  boost::asio::awaitable<bool> WriteChunk(std::string_view data);
  boost::asio::awaitable<bool> EndChunked();

  // A response of exactly `content_length` bytes written in parts: the header, then the
  // body with WriteBodyPart (a write finishes before the next starts). A sender that cannot
  // deliver all of it must give up the connection (set_keep_alive(false)): a body cut short
  // of its Content-Length is how HTTP reports the failure. False once the client is gone.
  boost::asio::awaitable<bool> BeginFixedLength(http::status status, std::string_view content_type,
                                                uint64_t content_length);
  boost::asio::awaitable<bool> WriteBodyPart(std::string_view data);

  // Extra headers for the next response (e.g. Allow on a 405); a name set again is replaced.
  void SetResponseHeader(http::field name, std::string value) {
    SetResponseHeader(std::string(FromBeast(http::to_string(name))), std::move(value));
  }
  void SetResponseHeader(std::string name, std::string value) {
    extra_headers_.emplace_back(std::move(name), std::move(value));
  }

  // Called once, as the response's status is settled and before any of it is sent (or the
  // connection is handed over): what must hold before the client learns the outcome (the
  // audit record, core/audit_log.h).
  void OnRespond(std::function<void(int status)> hook) { on_respond_ = std::move(hook); }
  // What a handler found in the request worth recording with it (the audit's detail: "cmd").
  void Note(const std::string& key, nlohmann::json value) { notes_[key] = std::move(value); }
  const nlohmann::json& notes() const { return notes_; }

  int status() const { return status_; }               // 0 until a response started
  bool response_started() const { return status_ != 0; }
  // Whether the connection can carry another request after this one.
  bool keep_alive() const { return keep_alive_; }
  void set_keep_alive(bool keep_alive) { keep_alive_ = keep_alive; }
  // Drops the connection at once with a TCP reset, the response unfinished: what a client sees
  // when the far end of a proxy goes away. (A FIN reads as a clean end, truncated or not.)
  void Abort();
  // The connection was handed to another protocol (a WebSocket) whose handshake answered
  // with `status`: record it (metrics, logs); the connection carries no more HTTP requests.
  void HandOver(int status) {
    Responding(status);
    keep_alive_ = false;
  }

 private:
  // The header of a streamed response: chunked (and not cached) without a content length.
  boost::asio::awaitable<bool> WriteStreamHeader(http::status status, std::string_view content_type,
                                                 std::optional<uint64_t> content_length);
  // Answers Status for a failed body read, and gives up on the connection.
  Error BodyReadError(const boost::system::error_code& ec);
  void PrepareResponse(http::response_header<>& header, http::status status);
  void Responding(int status);  // sets status_, runs the OnRespond hook

  HttpStream& stream_;
  std::string client_address_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::empty_body>& parser_;
  RequestHeader request_;  // a copy: the parser moves on to read the body
  bool body_consumed_;
  bool continue_answered_ = false;
  bool keep_alive_;
  const std::atomic<bool>& server_stopping_;
  int status_ = 0;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
  std::function<void(int)> on_respond_;
  nlohmann::json notes_ = nlohmann::json::object();
};

}  // namespace bulkhead::api
