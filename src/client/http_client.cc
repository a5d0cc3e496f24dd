#include "client/http_client.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <exception>
#include <limits>
#include <vector>

#include "client/daemon_socket.h"

namespace bulkhead::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

// A whole response body (errors, JSON, non-streamed output) is kept in memory up to this.
constexpr size_t kMaxBufferedBody = 512u << 20;
constexpr size_t kReadChunkBytes = 64 << 10;

http::verb ToVerb(HttpMethod method) {
  switch (method) {
    case HttpMethod::kGet: return http::verb::get;
    case HttpMethod::kPost: return http::verb::post;
    case HttpMethod::kPut: return http::verb::put;
    case HttpMethod::kPatch: return http::verb::patch;
    case HttpMethod::kDelete: return http::verb::delete_;
  }
  return http::verb::get;
}

Error ConnectionLost(const ServerAddress& address, const std::string& during, const error_code& ec) {
  return MakeError(ErrorCode::kUnavailable,
                   "connection to the daemon at " + address.ToUrl() + " failed while " + during + ": " +
                       ec.message(),
                   "connection_lost");
}

Error FromException(const std::exception& e) {
  return MakeError(ErrorCode::kInternal, std::string("HTTP client failure: ") + e.what(), "client_error");
}

// "application/json; charset=utf-8" -> "application/json".
std::string MediaType(std::string_view header) {
  std::string media(header.substr(0, header.find(';')));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  std::transform(media.begin(), media.end(), media.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return media;
}

// One connection to the daemon; the io_context only backs the blocking socket.
class Connection {
 public:
  Connection(const ServerAddress& address, RequestCanceller* canceller) : address_(address), canceller_(canceller) {}
  ~Connection() {
    if (attached_) canceller_->Detach(socket_.native_handle());
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Status Open() {
    if (canceller_ != nullptr && canceller_->cancelled()) return Cancelled();
    BH_TRY(ConnectToDaemon(address_, socket_));
    if (canceller_ != nullptr) {
      BH_TRY(canceller_->Attach(socket_.native_handle()));
      attached_ = true;
    }
    return {};
  }

  asio::generic::stream_protocol::socket& socket() { return socket_; }
  beast::flat_buffer& read_buffer() { return read_buffer_; }

 private:
  static Error Cancelled() { return MakeError(ErrorCode::kUnavailable, "the request was cancelled", "cancelled"); }

  const ServerAddress& address_;
  RequestCanceller* canceller_;  // may be null
  bool attached_ = false;
  asio::io_context io_;
  asio::generic::stream_protocol::socket socket_{io_};
  beast::flat_buffer read_buffer_;
};

template <typename Fields>
void SetCommonHeaders(Fields& message, const ServerAddress& address, const std::string& api_key) {
  message.set(http::field::host, address.HostHeader());
  message.set(http::field::user_agent, "bulkhead-cli/" BULKHEAD_VERSION);
  if (!api_key.empty()) message.set(http::field::authorization, "Bearer " + api_key);
}

// Reads one response from a connection: the header, then the body piece by piece as it
// arrives, never holding more than one piece.
class ResponseReader {
 public:
  ResponseReader(Connection& connection, const ServerAddress& address)
      : connection_(connection), address_(address), chunk_(kReadChunkBytes) {
    // No limit: a buffered body is capped by kMaxBufferedBody, a stream is not. (Not
    // boost::none: Boost 1.74 then refuses every body with a Content-Length.)
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  // Fills head(): status and content type, body empty.
  Status ReadHeader() {
    error_code ec;
    http::read_header(connection_.socket(), connection_.read_buffer(), parser_, ec);
    if (ec) return ConnectionLost(address_, "reading the response", ec);
    auto& message = parser_.get();
    head_.status = static_cast<int>(message.result_int());
    auto content_type = message[http::field::content_type];
    head_.content_type = MediaType(std::string_view(content_type.data(), content_type.size()));
    return {};
  }

  // The next piece of the body (valid until the next call); empty once the body ended.
  Result<std::string_view> ReadSome() {
    auto& message = parser_.get();
    while (!parser_.is_done()) {
      message.body().data = chunk_.data();
      message.body().size = chunk_.size();
      error_code ec;
      // read_some returns as soon as some input was parsed: output reaches us live.
      http::read_some(connection_.socket(), connection_.read_buffer(), parser_, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return ConnectionLost(address_, "reading the response", ec);
      std::string_view piece(chunk_.data(), chunk_.size() - message.body().size);
      if (!piece.empty()) return piece;
    }
    return std::string_view();
  }

  // The rest of the body, collected into head().body (bounded).
  Result<HttpResponse> ReadRest() {
    HttpResponse response = head_;
    for (;;) {
      auto piece = ReadSome();
      if (!piece.ok()) return piece.error();
      if (piece->empty()) return response;
      if (response.body.size() + piece->size() > kMaxBufferedBody) {
        return MakeError(ErrorCode::kTooLarge, "response from the daemon is too large", "response_too_large");
      }
      response.body.append(*piece);
    }
  }

  const HttpResponse& head() const { return head_; }
  std::optional<uint64_t> content_length() const {
    auto length = parser_.content_length();
    return length ? std::optional<uint64_t>(*length) : std::nullopt;
  }

 private:
  Connection& connection_;
  const ServerAddress& address_;
  http::response_parser<http::buffer_body> parser_;
  std::vector<char> chunk_;
  HttpResponse head_;
};

// Reads one response. With `on_line`, a 2xx NDJSON body goes there line by line as it
// arrives; every other body is collected into the response.
Result<HttpResponse> ReadResponse(Connection& connection, const ServerAddress& address,
                                  const LineHandler* on_line) {
  ResponseReader reader(connection, address);
  BH_TRY(reader.ReadHeader());
  const HttpResponse& head = reader.head();
  bool as_lines = on_line != nullptr && head.ok() && head.content_type == "application/x-ndjson";
  if (!as_lines) return reader.ReadRest();
  LineSplitter splitter;
  for (;;) {
    auto piece = reader.ReadSome();
    if (!piece.ok()) return piece.error();
    if (piece->empty()) break;
    BH_TRY(splitter.Feed(*piece, *on_line));
  }
  BH_TRY(splitter.Finish(*on_line));
  return head;
}

Result<HttpResponse> SendBuffered(const ServerAddress& address, const std::string& api_key,
                                  RequestCanceller* canceller, HttpMethod method, const std::string& target,
                                  const std::string& json_body, const LineHandler* on_line) {
  Connection connection(address, canceller);
  BH_TRY(connection.Open());
  http::request<http::string_body> request{ToVerb(method), target, 11};
  SetCommonHeaders(request, address, api_key);
  request.set(http::field::accept, on_line ? "application/x-ndjson" : "application/json");
  if (!json_body.empty()) {
    request.set(http::field::content_type, "application/json");
    request.body() = json_body;
  }
  request.prepare_payload();
  error_code ec;
  http::write(connection.socket(), request, ec);
  if (ec) {
    // The daemon may have refused the body early (413...) and closed: its answer
    // explains more than our broken pipe does.
    Result<HttpResponse> early_answer = ReadResponse(connection, address, nullptr);
    if (early_answer.ok()) return early_answer;
    return ConnectionLost(address, "sending the request", ec);
  }
  return ReadResponse(connection, address, on_line);
}

}  // namespace

void RequestCanceller::Cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

bool RequestCanceller::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

Status RequestCanceller::Attach(int fd) {
  std::lock_guard lock(mutex_);
  if (cancelled_) return MakeError(ErrorCode::kUnavailable, "the request was cancelled", "cancelled");
  fds_.insert(fd);
  return {};
}

void RequestCanceller::Detach(int fd) {
  std::lock_guard lock(mutex_);
  fds_.erase(fd);
}

HttpClient::HttpClient(ServerAddress address, std::string api_key)
    : address_(std::move(address)), api_key_(std::move(api_key)) {}

HttpClient HttpClient::WithCanceller(std::shared_ptr<RequestCanceller> canceller) const {
  HttpClient copy = *this;
  copy.canceller_ = std::move(canceller);
  return copy;
}

Result<HttpResponse> HttpClient::Send(HttpMethod method, const std::string& target,
                                      const std::string& json_body) const {
  try {
    return SendBuffered(address_, api_key_, canceller_.get(), method, target, json_body, nullptr);
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Result<HttpResponse> HttpClient::SendForLines(HttpMethod method, const std::string& target,
                                              const std::string& json_body, const LineHandler& on_line) const {
  try {
    return SendBuffered(address_, api_key_, canceller_.get(), method, target, json_body, &on_line);
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Result<HttpResponse> HttpClient::SendStreamingBody(HttpMethod method, const std::string& target,
                                                   const std::string& content_type,
                                                   std::optional<uint64_t> content_length,
                                                   const BodyProducer& produce, const LineHandler* on_line) const {
  try {
    Connection connection(address_, canceller_.get());
    BH_TRY(connection.Open());
    http::request<http::empty_body> request{ToVerb(method), target, 11};
    SetCommonHeaders(request, address_, api_key_);
    request.set(http::field::accept, on_line ? "application/x-ndjson" : "application/json");
    request.set(http::field::content_type, content_type);
    if (content_length) {
      request.content_length(*content_length);
    } else {
      request.chunked(true);
    }
    http::request_serializer<http::empty_body> serializer{request};
    error_code ec;
    http::write_header(connection.socket(), serializer, ec);
    if (ec) return ConnectionLost(address_, "sending the request", ec);

    bool write_failed = false;
    Status produced = produce([&](std::string_view piece) -> Status {
      if (piece.empty()) return {};  // an empty chunk would end a chunked body
      asio::const_buffer bytes(piece.data(), piece.size());
      if (content_length) {
        asio::write(connection.socket(), bytes, ec);
      } else {
        asio::write(connection.socket(), http::make_chunk(bytes), ec);
      }
      if (ec) {
        write_failed = true;
        return ConnectionLost(address_, "sending the request body", ec);
      }
      return {};
    });
    if (!produced.ok() && !write_failed) {
      // A local failure (unreadable file...): drop the connection so the daemon sees a
      // truncated body and discards it.
      return produced.error();
    }
    if (produced.ok() && !content_length) {
      asio::write(connection.socket(), http::make_chunk_last(), ec);
      if (ec) write_failed = true;
    }
    // The daemon may have refused the body early (401, 413...) and closed: its answer
    // explains more than our broken pipe does.
    Result<HttpResponse> response = ReadResponse(connection, address_, write_failed ? nullptr : on_line);
    if (!response.ok() && write_failed && !produced.ok()) return produced.error();
    return response;
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

// The connection and reader of a response read piece by piece; on the heap so the reader's
// references into the connection stay valid when the StreamedResponse moves.
struct StreamedResponse::State {
  State(ServerAddress server, std::shared_ptr<RequestCanceller> request_canceller)
      : address(std::move(server)),
        canceller(std::move(request_canceller)),
        connection(address, canceller.get()),
        reader(connection, address) {}
  ServerAddress address;
  std::shared_ptr<RequestCanceller> canceller;
  Connection connection;
  ResponseReader reader;
};

StreamedResponse::StreamedResponse(std::unique_ptr<State> state) : state_(std::move(state)) {}
StreamedResponse::StreamedResponse(StreamedResponse&&) noexcept = default;
StreamedResponse& StreamedResponse::operator=(StreamedResponse&&) noexcept = default;
StreamedResponse::~StreamedResponse() = default;

int StreamedResponse::status() const { return state_->reader.head().status; }
const std::string& StreamedResponse::content_type() const { return state_->reader.head().content_type; }
std::optional<uint64_t> StreamedResponse::content_length() const { return state_->reader.content_length(); }

Result<std::string_view> StreamedResponse::Read() {
  try {
    return state_->reader.ReadSome();
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Result<HttpResponse> StreamedResponse::ReadRest() {
  try {
    return state_->reader.ReadRest();
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Result<StreamedResponse> HttpClient::Open(HttpMethod method, const std::string& target,
                                          const std::string& accept) const {
  try {
    auto state = std::make_unique<StreamedResponse::State>(address_, canceller_);
    BH_TRY(state->connection.Open());
    http::request<http::empty_body> request{ToVerb(method), target, 11};
    SetCommonHeaders(request, address_, api_key_);
    request.set(http::field::accept, accept);
    request.prepare_payload();
    error_code ec;
    http::write(state->connection.socket(), request, ec);
    if (ec) return ConnectionLost(address_, "sending the request", ec);
    BH_TRY(state->reader.ReadHeader());
    return StreamedResponse(std::move(state));
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

}  // namespace bulkhead::cli
