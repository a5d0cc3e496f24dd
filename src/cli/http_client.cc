#include "cli/http_client.h"

#include <sys/un.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <exception>
#include <limits>
#include <vector>

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
    case HttpMethod::kDelete: return http::verb::delete_;
  }
  return http::verb::get;
}

std::string ParentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// What to tell the user when nothing answers at `address`.
Error ConnectError(const ServerAddress& address, const error_code& ec) {
  int err = ec.category() == boost::system::system_category() ? ec.value() : 0;
  std::string url = address.ToUrl();
  if (err == EACCES || err == EPERM) {
    return MakeError(ErrorCode::kForbidden,
                     "permission denied connecting to the daemon at " + url +
                         " (run as the daemon's user, e.g. with sudo, or use --url http://HOST:PORT)",
                     "permission_denied");
  }
  if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR) {
    std::string start_hint =
        address.kind == ServerAddress::Kind::kUnix
            ? "bulkhead serve --state-dir " + ParentDir(address.socket_path)
            : "bulkhead serve --listen " + address.HostHeader();
    return MakeError(ErrorCode::kUnavailable,
                     "cannot reach the bulkhead daemon at " + url + ": " + ec.message() +
                         ". Is it running? Start it with: sudo " + start_hint,
                     "daemon_not_running");
  }
  return MakeError(ErrorCode::kUnavailable, "cannot connect to the daemon at " + url + ": " + ec.message(),
                   "daemon_unreachable");
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
  explicit Connection(const ServerAddress& address) : address_(address) {}

  Status Open() {
    error_code ec;
    if (address_.kind == ServerAddress::Kind::kUnix) {
      if (address_.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
        return MakeError(ErrorCode::kBadRequest,
                         "socket path too long for a unix socket: " + address_.socket_path, "invalid_url");
      }
      asio::local::stream_protocol::endpoint endpoint(address_.socket_path);
      socket_.connect(asio::generic::stream_protocol::endpoint(endpoint), ec);
      if (ec) return ConnectError(address_, ec);
      return {};
    }
    asio::ip::tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(address_.host, std::to_string(address_.port), ec);
    if (ec) {
      return MakeError(ErrorCode::kUnavailable,
                       "cannot resolve daemon host '" + address_.host + "': " + ec.message(),
                       "daemon_unreachable");
    }
    for (const auto& entry : endpoints) {
      if (socket_.is_open()) socket_.close(ec);
      socket_.connect(asio::generic::stream_protocol::endpoint(entry.endpoint()), ec);
      if (!ec) return {};
    }
    return ConnectError(address_, ec);
  }

  asio::generic::stream_protocol::socket& socket() { return socket_; }
  beast::flat_buffer& read_buffer() { return read_buffer_; }

 private:
  const ServerAddress& address_;
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

// Reads one response. With `on_line`, a 2xx NDJSON body goes there line by line as it
// arrives; every other body is collected into the response.
Result<HttpResponse> ReadResponse(Connection& connection, const ServerAddress& address,
                                  const LineHandler* on_line) {
  http::response_parser<http::buffer_body> parser;
  // No limit: a buffered body is capped by kMaxBufferedBody below, a stream is not. (Not
  // boost::none: Boost 1.74 then refuses every body with a Content-Length.)
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  error_code ec;
  http::read_header(connection.socket(), connection.read_buffer(), parser, ec);
  if (ec) return ConnectionLost(address, "reading the response", ec);

  auto& message = parser.get();
  HttpResponse response;
  response.status = static_cast<int>(message.result_int());
  auto content_type = message[http::field::content_type];
  response.content_type = MediaType(std::string_view(content_type.data(), content_type.size()));
  bool as_lines = on_line != nullptr && response.ok() && response.content_type == "application/x-ndjson";

  LineSplitter splitter;
  std::vector<char> chunk(kReadChunkBytes);
  while (!parser.is_done()) {
    message.body().data = chunk.data();
    message.body().size = chunk.size();
    // read_some returns as soon as some input was parsed: output reaches us live.
    http::read_some(connection.socket(), connection.read_buffer(), parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return ConnectionLost(address, "reading the response", ec);
    std::string_view piece(chunk.data(), chunk.size() - message.body().size);
    if (piece.empty()) continue;
    if (as_lines) {
      BH_TRY(splitter.Feed(piece, *on_line));
    } else {
      if (response.body.size() + piece.size() > kMaxBufferedBody) {
        return MakeError(ErrorCode::kTooLarge, "response from the daemon is too large", "response_too_large");
      }
      response.body.append(piece);
    }
  }
  if (as_lines) BH_TRY(splitter.Finish(*on_line));
  return response;
}

Result<HttpResponse> SendBuffered(const ServerAddress& address, const std::string& api_key, HttpMethod method,
                                  const std::string& target, const std::string& json_body,
                                  const LineHandler* on_line) {
  Connection connection(address);
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

HttpClient::HttpClient(ServerAddress address, std::string api_key)
    : address_(std::move(address)), api_key_(std::move(api_key)) {}

Result<HttpResponse> HttpClient::Send(HttpMethod method, const std::string& target,
                                      const std::string& json_body) const {
  try {
    return SendBuffered(address_, api_key_, method, target, json_body, nullptr);
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Result<HttpResponse> HttpClient::SendForLines(HttpMethod method, const std::string& target,
                                              const std::string& json_body, const LineHandler& on_line) const {
  try {
    return SendBuffered(address_, api_key_, method, target, json_body, &on_line);
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

Result<HttpResponse> HttpClient::SendStreamingBody(HttpMethod method, const std::string& target,
                                                   const std::string& content_type,
                                                   std::optional<uint64_t> content_length,
                                                   const BodyProducer& produce) const {
  try {
    Connection connection(address_);
    BH_TRY(connection.Open());
    http::request<http::empty_body> request{ToVerb(method), target, 11};
    SetCommonHeaders(request, address_, api_key_);
    request.set(http::field::accept, "application/json");
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
    Result<HttpResponse> response = ReadResponse(connection, address_, nullptr);
    if (!response.ok() && write_failed && !produced.ok()) return produced.error();
    return response;
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

}  // namespace bulkhead::cli
