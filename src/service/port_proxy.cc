#include "service/port_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <cctype>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "net/allow_rules.h"
#include "net/ip_address.h"
#include "net/relay.h"
#include "service/port_through_init.h"
#include "service/preview_access.h"
#include "service/validate.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// Results of co_await go into named variables before they are tested: g++ 12 miscompiles
// `if (!co_await f()) co_return;` (the coroutine resumes into an invalid state).

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using net::StreamSocket;

constexpr uint32_t kMaxAppHeaderBytes = 64 * 1024;
constexpr size_t kResponsePieceBytes = 64 * 1024;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// Whether a comma-separated header value ("keep-alive, Upgrade") holds `token` (any case).
bool HasToken(std::string_view value, std::string_view token) {
  return http::token_list(ToBeast(value)).exists(ToBeast(token));
}

// Headers that describe one connection, not the message (RFC 9110 7.6.1), plus those
// named in its Connection header. Upgrade is one; the callers keep it for an upgrade.
bool IsHopByHop(std::string_view name, std::string_view connection_header) {
  static constexpr std::array kHopByHop = {"connection",          "keep-alive", "proxy-connection",
                                           "proxy-authenticate",  "proxy-authorization",
                                           "te",                  "trailer",    "transfer-encoding",
                                           "upgrade"};
  for (const char* hop : kHopByHop) {
    if (beast::iequals(ToBeast(name), hop)) return true;
  }
  return HasToken(connection_header, name);
}

Error NotListening(const std::string& id, uint16_t port) {
  return MakeError(ErrorCode::kBadGateway, fmt::format("nothing listens on port {} in sandbox {}", port, id),
                   std::string(kPortNotListening));
}

// A socket in the sandbox's network namespace connected to its loopback at `port`:
// 127.0.0.1 first, then [::1] (dev servers that bind "localhost" may take only the latter);
// for a sandbox with a kernel of its own, a relay through its init (port_through_init.h).
asio::awaitable<Result<StreamSocket>> ConnectToApp(core::SandboxManager& manager, const std::string& id,
                                                    uint16_t port) {
  const auto executor = co_await asio::this_coro::executor;
  Result<bool> through_init = manager.PortsThroughInit(id);
  if (!through_init.ok()) co_return through_init.error();
  if (*through_init) {
    Result<StreamSocket> relayed = co_await ConnectThroughInit(manager, id, port);
    if (!relayed.ok() && relayed.error().detail_code == "not_found") co_return NotListening(id, port);
    co_return relayed;
  }
  for (const int family : {AF_INET, AF_INET6}) {
    Result<UniqueFd> fd = manager.SandboxSocket(id, family);
    if (!fd.ok()) {
      if (family == AF_INET6) break;  // the v4 attempt was refused: that is the answer
      co_return fd.error();
    }
    StreamSocket socket(executor);
    error_code ec;
    socket.assign(asio::generic::stream_protocol(family, IPPROTO_TCP), fd->get(), ec);
    if (ec) co_return MakeError(ErrorCode::kInternal, "port proxy socket: " + ec.message());
    fd->release();
    const asio::ip::tcp::endpoint loopback(
        family == AF_INET ? asio::ip::address(asio::ip::address_v4::loopback())
                          : asio::ip::address(asio::ip::address_v6::loopback()),
        port);
    co_await socket.async_connect(asio::generic::stream_protocol::endpoint(loopback), Redirect(ec));
    if (!ec) {
      const int one = 1;
      setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      co_return std::move(socket);
    }
    if (family == AF_INET6) break;
    if (ec != asio::error::connection_refused) {
      co_return MakeError(ErrorCode::kBadGateway,
                          fmt::format("cannot connect to port {} in sandbox {}: {}", port, id, ec.message()));
    }
  }
  co_return NotListening(id, port);
}

// Validation and the connection, shared by both routes.
asio::awaitable<Result<StreamSocket>> OpenAppConnection(core::SandboxManager& manager, const std::string& id,
                                                         const std::string& port_text, ErrorCode bad_port) {
  if (!IsValidSandboxId(id)) co_return SandboxNotFound(id);
  const std::optional<uint16_t> port = net::ParsePort(port_text);
  if (!port) {
    co_return MakeError(bad_port, fmt::format("port must be a number from 1 to 65535, not \"{}\"", port_text),
                        bad_port == ErrorCode::kNotFound ? "not_found" : "invalid_argument");
  }
  co_return co_await ConnectToApp(manager, id, *port);
}

// Writes all of `bytes` to `socket` (no deadline: the app side). False on failure.
asio::awaitable<bool> WriteToApp(StreamSocket& app, asio::const_buffer bytes) {
  error_code ec;
  co_await asio::async_write(app, bytes, Redirect(ec));
  co_return !ec;
}

// Bytes the client sent past its request (an upgraded protocol's first bytes) go to the app
// before the raw relay takes over.
asio::awaitable<bool> PassOnClientLeftovers(HttpExchange& exchange, StreamSocket& app) {
  beast::flat_buffer& buffer = exchange.buffer();
  if (buffer.size() == 0) co_return true;
  const bool written = co_await WriteToApp(app, buffer.data());
  buffer.consume(buffer.size());
  co_return written;
}

// After a 101: the connection belongs to the upgraded protocol, relayed raw both ways.
asio::awaitable<void> RelayUpgraded(HttpExchange& exchange, StreamSocket& app) {
  const bool passed_on = co_await PassOnClientLeftovers(exchange, app);
  if (!passed_on) co_return;
  exchange.stream().expires_never();
  const auto counters = std::make_shared<net::RelayCounters>();
  co_await net::Relay(exchange.stream().socket(), app, counters);
}

// One proxied HTTP request. The request body goes up (parsed, so exactly the body and no
// pipelined bytes reach the app) while the response comes down: an app may answer before it
// read the whole body, or stream its answer while it reads. Both halves run on the
// connection's strand.
class HttpProxySession {
 public:
  HttpProxySession(HttpExchange& exchange, StreamSocket& app, const asio::any_io_executor& executor)
      : exchange_(exchange), app_(app), upload_done_(executor) {}

  asio::awaitable<void> Run(const PortProxyRequest& request, bool upgrade) {
    const RequestHeader head = AppRequestHead(exchange_.request(), request, exchange_.client_address(), upgrade);
    // Answered here, before anything else may write to the client.
    const Status continued = co_await exchange_.AnswerExpectContinue();
    if (!continued.ok()) co_return;
    http::request_serializer<http::empty_body> serializer(head);
    error_code ec;
    co_await http::async_write_header(app_, serializer, Redirect(ec));
    if (ec) {
      co_return co_await exchange_.SendError(
          MakeError(ErrorCode::kBadGateway, "the app closed the connection before taking the request: " + ec.message()));
    }
    const bool has_body = exchange_.request().chunked() || exchange_.request().has_content_length();
    if (has_body) {
      upload_running_ = true;
      const asio::any_io_executor executor = co_await asio::this_coro::executor;
      asio::co_spawn(executor, Upload(exchange_.request().chunked()), asio::detached);
    }
    co_await Download(upgrade);
    co_await StopUpload();
  }

 private:
  // Client -> app: the request body, re-framed as the client framed it.
  asio::awaitable<void> Upload(bool chunked) {
    bool app_failed = false;
    const HttpExchange::BodySink to_app = [this, chunked, &app_failed](std::string_view piece) -> asio::awaitable<Status> {
      const asio::const_buffer bytes(piece.data(), piece.size());
      error_code ec;
      if (chunked) {
        co_await asio::async_write(app_, http::make_chunk(bytes), Redirect(ec));
      } else {
        co_await asio::async_write(app_, bytes, Redirect(ec));
      }
      if (ec) {
        app_failed = true;
        co_return MakeError(ErrorCode::kBadGateway, "the app stopped taking the request body");
      }
      co_return Status{};
    };
    Result<uint64_t> sent =
        co_await exchange_.ReadBodyStreamed(std::numeric_limits<uint64_t>::max(), to_app, /*hand_on_arrivals=*/true);
    if (sent.ok() && chunked) {
      error_code ec;
      co_await asio::async_write(app_, http::make_chunk_last(), Redirect(ec));
    }
    if (!sent.ok() && !app_failed && !stopping_upload_) {
      // The client went away mid-body: nobody waits for an answer.
      client_gone_ = true;
      error_code ignored;
      app_.cancel(ignored);
    }
    // An app that stopped reading may still answer (413, an early error): Download waits for it.
    upload_running_ = false;
    upload_done_.cancel();
  }

  asio::awaitable<void> StopUpload() {
    if (!upload_running_) co_return;
    stopping_upload_ = true;
    error_code ignored;
    exchange_.stream().socket().cancel(ignored);
    app_.cancel(ignored);
    while (upload_running_) {
      upload_done_.expires_at(asio::steady_timer::time_point::max());
      co_await upload_done_.async_wait(Redirect(ignored));
    }
  }

  // App -> client: the response head (after any interim 1xx), then its bytes as they come.
  asio::awaitable<void> Download(bool upgrade) {
    beast::flat_buffer from_app;
    std::optional<http::response_parser<http::empty_body>> parser;
    for (;;) {
      parser.emplace();
      parser->header_limit(kMaxAppHeaderBytes);
      parser->body_limit(std::numeric_limits<uint64_t>::max());
      error_code ec;
      co_await http::async_read_header(app_, from_app, *parser, Redirect(ec));
      if (ec) {
        if (client_gone_) co_return;
        co_await StopUpload();
        const std::string why = ec == http::error::end_of_stream || ec == asio::error::connection_reset
                                    ? "the app closed the connection without answering"
                                    : "the app's answer is not HTTP: " + ec.message();
        co_return co_await exchange_.SendError(MakeError(ErrorCode::kBadGateway, why));
      }
      const unsigned status = parser->get().result_int();
      if (status >= 200 || status == 101) break;
      // Interim (100 Continue, 103 Early Hints): passed on to an HTTP/1.1 client.
      if (exchange_.request().version() >= 11) {
        http::response<http::empty_body> interim = ClientResponseHead(parser->get().base(), 11);
        const bool written = co_await WriteHead(interim);
        if (!written) co_return;
      }
    }
    const unsigned status = parser->get().result_int();
    if (status == 101 && !upgrade) {
      co_await StopUpload();
      co_return co_await exchange_.SendError(
          MakeError(ErrorCode::kBadGateway, "the app switched protocols without being asked to"));
    }
    http::response<http::empty_body> head = ClientResponseHead(parser->get().base(), exchange_.request().version());
    const bool head_written = co_await WriteHead(head);
    if (!head_written) co_return;
    exchange_.HandOver(static_cast<int>(status));
    const bool early_written = co_await WriteToClient(from_app.data());
    if (!early_written) co_return;
    from_app.consume(from_app.size());
    if (status == 101) {
      co_await StopUpload();  // an upgrade request has no body: nothing is cut here
      co_return co_await RelayUpgraded(exchange_, app_);
    }
    // The body as the app frames it, until the app closes (it was asked to, and the client
    // is told Connection: close).
    std::vector<char> piece(kResponsePieceBytes);
    for (;;) {
      error_code ec;
      const size_t n = co_await app_.async_read_some(asio::buffer(piece), Redirect(ec));
      if (n > 0) {
        const bool written = co_await WriteToClient(asio::const_buffer(piece.data(), n));
        if (!written) co_return;
      }
      if (ec) co_return;
    }
  }

  asio::awaitable<bool> WriteHead(http::response<http::empty_body>& head) {
    http::response_serializer<http::empty_body> serializer(head);
    error_code ec;
    exchange_.stream().expires_after(kWriteTimeout);
    co_await http::async_write_header(exchange_.stream(), serializer, Redirect(ec));
    co_return !ec;
  }

  asio::awaitable<bool> WriteToClient(asio::const_buffer bytes) {
    if (bytes.size() == 0) co_return true;
    error_code ec;
    exchange_.stream().expires_after(kWriteTimeout);
    co_await asio::async_write(exchange_.stream(), bytes, Redirect(ec));
    co_return !ec;
  }

  HttpExchange& exchange_;
  StreamSocket& app_;
  bool upload_running_ = false;
  bool stopping_upload_ = false;
  bool client_gone_ = false;
  asio::steady_timer upload_done_;  // cancelled when Upload ends
};

}  // namespace

std::string ClientAddress(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return {};
  if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) return {};
  return net::IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&peer)).ToString();
}

bool IsUpgradeRequest(const RequestHeader& request) {
  return HasToken(FromBeast(request[http::field::connection]), "upgrade") &&
         !FromBeast(request[http::field::upgrade]).empty();
}

RequestHeader AppRequestHead(const RequestHeader& client, const PortProxyRequest& request,
                             std::string_view client_address, bool upgrade) {
  RequestHeader head;
  head.method_string(client.method_string());
  head.target(ToBeast(request.app_target));
  head.version(client.version());
  const std::string_view connection = FromBeast(client[http::field::connection]);
  for (const auto& field : client) {
    const std::string_view name = FromBeast(field.name_string());
    if (IsHopByHop(name, connection)) continue;
    switch (field.name()) {
      case http::field::host:
      case http::field::expect:
      case http::field::content_length:
        continue;  // set below
      case http::field::authorization:
        if (request.strip_authorization) continue;
        break;
      case http::field::cookie: {
        // The preview cookie opens the port; the app's own cookies pass.
        const std::string cookies = CookiesWithoutPreviewToken(FromBeast(field.value()));
        if (!cookies.empty()) head.insert(http::field::cookie, cookies);
        continue;
      }
      default:
        if (beast::iequals(field.name_string(), ToBeast(kPreviewTokenHeader)) ||
            beast::iequals(field.name_string(), ToBeast(kE2bTrafficTokenHeader)) ||
            beast::iequals(field.name_string(), "x-forwarded-for") ||
            beast::iequals(field.name_string(), "x-forwarded-host") ||
            beast::iequals(field.name_string(), "x-forwarded-proto") ||
            beast::iequals(field.name_string(), "x-forwarded-prefix")) {
          continue;
        }
    }
    head.insert(field.name_string(), field.value());
  }
  const std::string_view original_host = FromBeast(client[http::field::host]);
  head.set(http::field::host, request.by_host ? std::string(original_host) : "localhost:" + request.port);
  std::string forwarded_for(FromBeast(client["X-Forwarded-For"]));
  if (!client_address.empty()) {
    forwarded_for += forwarded_for.empty() ? std::string(client_address) : ", " + std::string(client_address);
  }
  if (!forwarded_for.empty()) head.set("X-Forwarded-For", forwarded_for);
  if (!original_host.empty()) head.set("X-Forwarded-Host", ToBeast(original_host));
  head.set("X-Forwarded-Proto", "http");
  if (!request.by_host) {
    head.set("X-Forwarded-Prefix", fmt::format("/v1/sandboxes/{}/ports/{}", request.sandbox_id, request.port));
  }
  // The body goes up as the client framed it.
  if (client.chunked()) {
    head.set(http::field::transfer_encoding, client[http::field::transfer_encoding]);
  } else if (client.has_content_length()) {
    head.set(http::field::content_length, client[http::field::content_length]);
  }
  if (upgrade) {
    head.set(http::field::upgrade, client[http::field::upgrade]);
    head.set(http::field::connection, "Upgrade");
  } else {
    head.set(http::field::connection, "close");
  }
  return head;
}

http::response<http::empty_body> ClientResponseHead(const http::response_header<>& app, unsigned version) {
  http::response<http::empty_body> head;
  head.version(version);
  head.result(app.result_int());
  head.reason(app.reason());
  const bool switching = app.result() == http::status::switching_protocols;
  const std::string_view connection = FromBeast(app[http::field::connection]);
  for (const auto& field : app) {
    const std::string_view name = FromBeast(field.name_string());
    // The body is relayed as the app framed it: its framing headers stay.
    const bool framing = field.name() == http::field::transfer_encoding || field.name() == http::field::trailer;
    if (!framing && IsHopByHop(name, connection)) continue;
    head.insert(field.name_string(), field.value());
  }
  if (switching) {
    head.set(http::field::upgrade, app[http::field::upgrade]);
    head.set(http::field::connection, "Upgrade");
  } else if (app.result_int() >= 200) {
    head.set(http::field::connection, "close");
  }
  return head;
}

asio::awaitable<Result<StreamSocket>> ConnectToPort(core::SandboxManager& manager, const PortProxyRequest& request) {
  const ErrorCode bad_port = request.by_host ? ErrorCode::kNotFound : ErrorCode::kInvalid;
  co_return co_await OpenAppConnection(manager, request.sandbox_id, request.port, bad_port);
}

asio::awaitable<void> RelayToPort(HttpExchange& exchange, StreamSocket app, const PortProxyRequest& request) {
  const bool upgrade = IsUpgradeRequest(exchange.request());
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  HttpProxySession session(exchange, app, executor);
  co_await session.Run(request, upgrade);
}

asio::awaitable<void> ServePortProxy(HttpExchange& exchange, core::SandboxManager& manager,
                                     const PortProxyRequest& request) {
  Result<StreamSocket> app = co_await ConnectToPort(manager, request);
  if (!app.ok()) co_return co_await exchange.SendError(app.error());
  co_await RelayToPort(exchange, std::move(*app), request);
}

asio::awaitable<void> ServeTcpForward(HttpExchange& exchange, core::SandboxManager& manager,
                                      const std::string& sandbox_id, const std::string& port) {
  const RequestHeader& request = exchange.request();
  if (!IsUpgradeRequest(request) || !beast::iequals(request[http::field::upgrade], "tcp")) {
    co_return co_await exchange.SendError(MakeError(
        ErrorCode::kBadRequest, "port-forward is a protocol upgrade: send Connection: Upgrade and Upgrade: tcp"));
  }
  Result<StreamSocket> app = co_await OpenAppConnection(manager, sandbox_id, port, ErrorCode::kInvalid);
  if (!app.ok()) co_return co_await exchange.SendError(app.error());
  http::response<http::empty_body> switching{http::status::switching_protocols, request.version()};
  switching.set(http::field::server, "bulkhead/" BULKHEAD_VERSION);
  switching.set(http::field::upgrade, "tcp");
  switching.set(http::field::connection, "Upgrade");
  error_code ec;
  exchange.stream().expires_after(kWriteTimeout);
  co_await http::async_write(exchange.stream(), switching, Redirect(ec));
  exchange.HandOver(101);
  if (ec) co_return;
  co_await RelayUpgraded(exchange, *app);
}

}  // namespace bulkhead::api
