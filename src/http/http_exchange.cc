#include "http/http_exchange.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <vector>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "http/json_text.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

constexpr std::string_view kServerName = "bulkhead/" BULKHEAD_VERSION;
// The most Beast's HTTP reads take from the socket at once.
constexpr size_t kSocketReadBytes = 64 * 1024;

Error TooLarge(uint64_t limit) {
  return MakeError(ErrorCode::kTooLarge, fmt::format("request body exceeds {} bytes", limit));
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  }
  return true;
}

}  // namespace

HttpExchange::HttpExchange(HttpStream& stream, beast::flat_buffer& buffer,
                           http::request_parser<http::empty_body>& parser,
                           const std::atomic<bool>& server_stopping, std::string client_address)
    : stream_(stream),
      client_address_(std::move(client_address)),
      buffer_(buffer),
      parser_(parser),
      request_(parser.get()),
      body_consumed_(parser.is_done()),
      keep_alive_(parser.get().keep_alive()),
      server_stopping_(server_stopping) {}

asio::awaitable<Status> HttpExchange::AnswerExpectContinue() {
  if (continue_answered_ || !IEquals(FromBeast(request_[http::field::expect]), "100-continue")) co_return Status{};
  continue_answered_ = true;
  http::response<http::empty_body> interim{http::status::continue_, request_.version()};
  interim.set(http::field::server, ToBeast(kServerName));
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await http::async_write(stream_, interim, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    keep_alive_ = false;
    co_return MakeError(ErrorCode::kBadRequest, "client went away: " + ec.message());
  }
  co_return Status{};
}

Error HttpExchange::BodyReadError(const error_code& ec) {
  // The rest of the body is unread (or the stream is broken): this connection is done.
  keep_alive_ = false;
  if (ec == beast::error::timeout) {
    return MakeError(ErrorCode::kBadRequest, "timed out reading the request body");
  }
  return MakeError(ErrorCode::kBadRequest, "could not read the request body: " + ec.message());
}

asio::awaitable<Result<std::string>> HttpExchange::ReadBody(uint64_t limit) {
  if (body_consumed_) co_return std::string();
  if (auto length = parser_.content_length(); length && *length > limit) {
    keep_alive_ = false;
    co_return TooLarge(limit);
  }
  if (Status status = co_await AnswerExpectContinue(); !status.ok()) co_return status.error();

  http::request_parser<http::string_body> body_parser(std::move(parser_));
  body_parser.body_limit(limit);
  body_consumed_ = true;
  error_code ec;
  stream_.expires_after(kReadTimeout);
  co_await http::async_read(stream_, buffer_, body_parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    co_return TooLarge(limit);
  }
  if (ec) co_return BodyReadError(ec);
  co_return std::move(body_parser.get().body());
}

asio::awaitable<Result<uint64_t>> HttpExchange::ReadBodyToFile(int fd, uint64_t limit) {
  // Writing to a local file on the io thread: page-cache writes of a piece take
  // microseconds, far less than the hop to the blocking pool would cost.
  const BodySink write_to_file = [fd](std::string_view piece) -> asio::awaitable<Status> {
    for (size_t written = 0; written < piece.size();) {
      const ssize_t n = write(fd, piece.data() + written, piece.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        co_return SystemError("write upload", errno);
      }
      written += size_t(n);
    }
    co_return Status{};
  };
  co_return co_await ReadBodyStreamed(limit, write_to_file);
}

asio::awaitable<Result<uint64_t>> HttpExchange::ReadBodyStreamed(uint64_t limit, const BodySink& sink,
                                                                  bool hand_on_arrivals) {
  if (body_consumed_) co_return uint64_t{0};
  if (auto length = parser_.content_length(); length && *length > limit) {
    keep_alive_ = false;
    co_return TooLarge(limit);
  }
  if (Status status = co_await AnswerExpectContinue(); !status.ok()) co_return status.error();

  uint64_t total = 0;
  http::request_parser<http::buffer_body> body_parser(std::move(parser_));
  body_parser.body_limit(limit);
  body_consumed_ = true;
  std::vector<char> piece(kBodyPieceBytes);
  // Beast reads into the connection's buffer as much as its capacity allows (at least 512
  // bytes, at most 64 KiB) before copying into the piece: give it room for 64 KiB reads
  // while the body streams, and hand the memory back after.
  buffer_.reserve(kSocketReadBytes);
  struct ShrinkAfter {
    beast::flat_buffer& buffer;
    ~ShrinkAfter() { buffer.shrink_to_fit(); }
  } shrink_after{buffer_};
  while (!body_parser.is_done()) {
    // Fill the piece (a read brings at most what one socket read holds), then hand it on.
    size_t filled = 0;
    while (filled < piece.size() && !body_parser.is_done() && !(hand_on_arrivals && filled > 0)) {
      body_parser.get().body().data = piece.data() + filled;
      body_parser.get().body().size = piece.size() - filled;
      error_code ec;
      stream_.expires_after(kReadTimeout);
      co_await http::async_read_some(stream_, buffer_, body_parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::body_limit) {
        keep_alive_ = false;
        co_return TooLarge(limit);
      }
      if (ec && ec != http::error::need_buffer) co_return BodyReadError(ec);
      filled = piece.size() - body_parser.get().body().size;
    }
    if (filled == 0) continue;
    Status handed = co_await sink(std::string_view(piece.data(), filled));
    if (!handed.ok()) {
      if (!body_parser.is_done()) keep_alive_ = false;  // the rest of the body stays unread
      co_return handed.error();
    }
    total += filled;
  }
  co_return total;
}

void HttpExchange::Responding(int status) {
  status_ = status;
  if (auto hook = std::move(on_respond_)) {
    on_respond_ = nullptr;
    hook(status);
  }
}

void HttpExchange::PrepareResponse(http::response_header<>& header, http::status status) {
  Responding(static_cast<int>(status));
  // A body left unread would be taken for the next request: close instead.
  if (!body_consumed_ || server_stopping_) keep_alive_ = false;
  header.version(request_.version());
  header.result(status);
  header.set(http::field::server, ToBeast(kServerName));
  for (const auto& [name, value] : extra_headers_) header.set(ToBeast(name), value);
}

asio::awaitable<void> HttpExchange::SendText(http::status status, std::string_view content_type,
                                             std::string body) {
  http::response<http::string_body> response;
  PrepareResponse(response.base(), status);
  response.set(http::field::content_type, ToBeast(content_type));
  response.body() = std::move(body);
  response.keep_alive(keep_alive_);
  response.prepare_payload();
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  if (request_.method() == http::verb::head) {
    // A response to HEAD has the header a GET would get and no content (RFC 9110 9.3.2): a
    // client reads none, and bytes sent anyway would be taken for the next response.
    http::response_serializer<http::string_body> serializer(response);
    co_await http::async_write_header(stream_, serializer, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await http::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec) keep_alive_ = false;
}

asio::awaitable<void> HttpExchange::SendJson(http::status status, const nlohmann::json& body) {
  // What a call made (a sandbox, snapshot, volume...) is known by the id it answers with.
  if (status == http::status::created && body.is_object() && body.contains("id")) Note("created", body["id"]);
  co_await SendText(status, "application/json", DumpJson(body) + "\n");
}

asio::awaitable<void> HttpExchange::SendError(const Error& error) {
  co_await SendJson(static_cast<http::status>(HttpStatus(error.code)), ErrorToJson(error));
}

asio::awaitable<void> HttpExchange::SendNoContent() {
  http::response<http::empty_body> response;
  PrepareResponse(response.base(), http::status::no_content);
  response.keep_alive(keep_alive_);
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await http::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) keep_alive_ = false;
}

asio::awaitable<std::optional<nlohmann::json>> HttpExchange::ReadJsonObject(uint64_t limit) {
  Result<std::string> body = co_await ReadBody(limit);
  if (!body.ok()) {
    co_await SendError(body.error());
    co_return std::nullopt;
  }
  Result<nlohmann::json> parsed = ParseJsonObject(*body);
  if (!parsed.ok()) {
    co_await SendError(parsed.error());
    co_return std::nullopt;
  }
  co_return std::move(parsed.value());
}

asio::awaitable<bool> HttpExchange::BeginChunked(http::status status, std::string_view content_type) {
  co_return co_await WriteStreamHeader(status, content_type, std::nullopt);
}

asio::awaitable<bool> HttpExchange::WriteStreamHeader(http::status status, std::string_view content_type,
                                                      std::optional<uint64_t> content_length) {
  http::response<http::empty_body> response;
  PrepareResponse(response.base(), status);
  response.set(http::field::content_type, ToBeast(content_type));
  response.keep_alive(keep_alive_);
  if (content_length) {
    response.content_length(*content_length);
  } else {
    // Streams are read as they come; tell proxies not to hold them back.
    response.set(http::field::cache_control, "no-store");
    response.chunked(true);
  }
  http::response_serializer<http::empty_body> serializer(response);
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await http::async_write_header(stream_, serializer, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) keep_alive_ = false;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::WriteChunk(std::string_view data) {
  if (data.empty()) co_return true;  // an empty chunk would end the response
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data.data(), data.size())),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) keep_alive_ = false;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::BeginFixedLength(http::status status, std::string_view content_type,
                                                     uint64_t content_length) {
  co_return co_await WriteStreamHeader(status, content_type, content_length);
}

asio::awaitable<bool> HttpExchange::WriteBodyPart(std::string_view data) {
  if (data.empty()) co_return true;
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await asio::async_write(stream_, asio::buffer(data.data(), data.size()), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) keep_alive_ = false;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::EndChunked() {
  error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await asio::async_write(stream_, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) keep_alive_ = false;
  co_return !ec;
}

void HttpExchange::Abort() {
  keep_alive_ = false;
  beast::error_code ignored;
  stream_.socket().set_option(boost::asio::socket_base::linger(true, 0), ignored);
  stream_.socket().close(ignored);
}

}  // namespace bulkhead::api
