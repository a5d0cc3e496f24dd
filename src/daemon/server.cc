#include "daemon/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/json_output.h"
#include "api/router.h"
#include "common/time_format.h"
#include "common/unique_fd.h"
#include "core/audit_log.h"
#include "api/access.h"
#include "service/api_key.h"
#include "service/port_proxy.h"
#include "service/preview_access.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using GenericProtocol = asio::generic::stream_protocol;
namespace websocket = boost::beast::websocket;

namespace {

constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
// After a response that ends a connection, how long unread client bytes are drained so
// that closing does not reset the connection before the client read the response.
constexpr std::chrono::seconds kLingerTime{2};
constexpr size_t kMaxLingerBytes = 64 * 1024 * 1024;  // drained into a 16 KiB sink: time-bound, not memory
// How long a TLS client has for its handshake (as for a plain one's request headers).
constexpr std::chrono::milliseconds kTlsHandshakeTimeout{10000};
constexpr std::chrono::seconds kTlsFileCheckInterval{5};

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// A response for a request that never became an HttpExchange (unparseable, over limits).
asio::awaitable<void> SendBareError(HttpStream& stream, http::status status, std::string_view code,
                                    std::string_view message) {
  http::response<http::string_body> response{status, 11};
  response.set(http::field::server, "bulkhead/" BULKHEAD_VERSION);
  response.set(http::field::content_type, "application/json");
  response.keep_alive(false);
  const nlohmann::json body = {{"error", {{"code", code}, {"message", message}}}};
  response.body() = DumpJson(body) + "\n";
  response.prepare_payload();
  error_code ec;
  stream.expires_after(kWriteTimeout);
  co_await http::async_write(stream, response, Redirect(ec));
}

// Ends a connection gently: stop sending, then read and drop what the client still sends
// (bounded in time and bytes), then close.
asio::awaitable<void> CloseGracefully(HttpStream& stream) {
  error_code ec;
  stream.socket().shutdown(asio::socket_base::shutdown_send, ec);
  if (!ec) {
    std::array<char, 16 * 1024> sink;
    size_t drained = 0;
    stream.expires_after(kLingerTime);
    while (drained < kMaxLingerBytes) {
      const size_t n = co_await stream.async_read_some(asio::buffer(sink), Redirect(ec));
      if (ec) break;
      drained += n;
    }
  }
  stream.close();
}

Result<tcp::endpoint> ParseListenAddress(const std::string& host_port, asio::io_context& io) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return MakeError(ErrorCode::kInvalid, fmt::format("listen address \"{}\" is not host:port", host_port));
  }
  std::string host = host_port.substr(0, colon);
  const std::string port_text = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos || (port = std::stoul(port_text)) > 65535) {
    return MakeError(ErrorCode::kInvalid, fmt::format("listen address \"{}\" has a bad port", host_port));
  }
  if (host == "localhost") host = "127.0.0.1";
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(address, static_cast<uint16_t>(port));
  // A host name: resolve it (startup only, so blocking is fine).
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, port_text, ec);
  if (ec || results.empty()) {
    return MakeError(ErrorCode::kInvalid, fmt::format("cannot resolve listen host \"{}\": {}", host, ec.message()));
  }
  return results.begin()->endpoint();
}

}  // namespace

struct ApiServer::Listener {
  Listener(asio::any_io_executor executor, GenericProtocol accepted_protocol, bool is_tcp, std::string name)
      : acceptor(std::move(executor)), protocol(accepted_protocol), tcp(is_tcp), description(std::move(name)) {}
  asio::basic_socket_acceptor<GenericProtocol> acceptor;
  GenericProtocol protocol;  // of the accepted sockets
  bool tcp;
  std::string description;
  bool e2b = false;  // serves the E2B front rather than the API
};

ApiServer::ApiServer(core::SandboxManager& manager, ServerOptions options)
    : manager_(manager),
      options_(std::move(options)),
      work_(io_.get_executor()),
      control_(io_.get_executor()),
      blocking_pool_(static_cast<size_t>(std::max(1, options_.blocking_threads))) {
  handlers_ = std::make_unique<ApiHandlers>(HandlerContext{
      .manager = manager_,
      .blocking_pool = blocking_pool_,
      .pull_pool = pull_pool_,
      .metrics = metrics_,
      .upload_dir = options_.upload_dir,
      .host = HostLimits::Detect(manager_.config().default_runtime),
      .open_connections = [this] { return open_connections_.load(); },
      .tcp_addresses = [this] { return tcp_addresses_; },
      .e2b_address = [this] { return e2b_address_; },
      .preview_domain = options_.preview_domain,
      .audit = options_.audit,
      .keys = options_.keys,
      .forget_tenant =
          [this](const std::string& tenant) {
            if (e2b_) e2b_->ForgetTenant(tenant);
          },
  });
  if (options_.handle_signals) {
    // Registered now, so a signal that arrives before Run is not lost.
    signals_ = std::make_unique<asio::signal_set>(control_, SIGINT, SIGTERM);
    reload_signals_ = std::make_unique<asio::signal_set>(control_, SIGHUP);
  }
}

ApiServer::~ApiServer() = default;

Result<tcp::endpoint> ApiServer::ListenE2b(const std::string& host_port) {
  if (options_.e2b_key.empty()) return MakeError(ErrorCode::kInternal, "the E2B front needs its key");
  Result<tcp::endpoint> bound = ListenTcp(host_port);
  if (!bound.ok()) return bound;
  // ListenTcp counted it among the API's addresses; it is the E2B front's.
  e2b_address_ = tcp_addresses_.back();
  tcp_addresses_.pop_back();
  listeners_.back()->e2b = true;
  listeners_.back()->description = fmt::format("http://{} (E2B front)", host_port);
  e2b_ = std::make_unique<e2b::E2bFront>(e2b::E2bContext{
      .manager = manager_,
      .blocking_pool = blocking_pool_,
      .key = options_.e2b_key,
      .keys = options_.keys,
      .domain = options_.e2b_domain.empty() ? e2b::DefaultE2bDomain(host_port, bound->port())
                                            : options_.e2b_domain,
      .host = HostLimits::Detect(manager_.config().default_runtime),
      .pull_pool = &pull_pool_,
      .upload_dir = options_.upload_dir,
      .templates = e2b::MakeTemplateBuilds(options_.upload_dir + "/" + e2b::kTemplateBuildsDir),
  });
  return bound;
}

Result<tcp::endpoint> ApiServer::ListenTcp(const std::string& host_port) {
  Result<tcp::endpoint> endpoint = ParseListenAddress(host_port, io_);
  if (!endpoint.ok()) return endpoint.error();
  const int family = endpoint->protocol().family();
  UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_TCP));
  if (!fd) return SystemError("socket", errno);
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), endpoint->data(), static_cast<socklen_t>(endpoint->size())) != 0) {
    return SystemError(fmt::format("bind {}", host_port), errno);
  }
  tcp::endpoint bound;
  socklen_t length = static_cast<socklen_t>(bound.capacity());
  if (getsockname(fd.get(), bound.data(), &length) != 0) return SystemError("getsockname", errno);
  bound.resize(length);
  // Out of the sandboxes' reach before the first connection can arrive.
  manager_.AddDaemonListener({net::IpAddress::FromSockaddr(bound.data()), bound.port()});
  if (listen(fd.get(), SOMAXCONN) != 0) return SystemError("listen", errno);
  const std::string address = bound.address().to_string();
  tcp_addresses_.push_back(bound.address().is_v6() ? fmt::format("[{}]:{}", address, bound.port())
                                                    : fmt::format("{}:{}", address, bound.port()));

  auto listener = std::make_unique<Listener>(control_, GenericProtocol(family, IPPROTO_TCP), true,
                                             fmt::format("{}://{}", options_.tls ? "https" : "http", host_port));
  error_code ec;
  listener->acceptor.assign(GenericProtocol(family, IPPROTO_TCP), fd.get(), ec);
  if (ec) return MakeError(ErrorCode::kInternal, "assign listener: " + ec.message());
  fd.release();
  listeners_.push_back(std::move(listener));
  return bound;
}

Status ApiServer::ListenUnix(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return MakeError(ErrorCode::kInvalid, fmt::format("socket path {} is too long", path));
  }
  path.copy(address.sun_path, path.size());
  const auto address_length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);

  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return MakeError(ErrorCode::kConflict, fmt::format("{} exists and is not a socket", path));
    }
    // A socket file that still accepts belongs to a running daemon; one that refuses is stale.
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!probe) return SystemError("socket", errno);
    if (connect(probe.get(), reinterpret_cast<sockaddr*>(&address), address_length) == 0) {
      return MakeError(ErrorCode::kConflict, fmt::format("another daemon is serving on {}", path));
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return SystemError("unlink " + path, errno);
  }

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return SystemError("socket", errno);
  // Linux creates the socket file with the socket's mode: 0600 from the first moment.
  if (fchmod(fd.get(), 0600) != 0) return SystemError("fchmod socket", errno);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&address), address_length) != 0) {
    return SystemError("bind " + path, errno);
  }
  if (chmod(path.c_str(), 0600) != 0) return SystemError("chmod " + path, errno);
  if (listen(fd.get(), SOMAXCONN) != 0) return SystemError("listen", errno);

  auto listener = std::make_unique<Listener>(control_, GenericProtocol(AF_UNIX, 0), false, "unix:" + path);
  error_code ec;
  listener->acceptor.assign(GenericProtocol(AF_UNIX, 0), fd.get(), ec);
  if (ec) return MakeError(ErrorCode::kInternal, "assign listener: " + ec.message());
  fd.release();
  listeners_.push_back(std::move(listener));
  return {};
}

void ApiServer::Run() {
  if (signals_) WaitForSignal();
  if (reload_signals_) WaitForReloadSignal();
  if (options_.tls) asio::co_spawn(control_, WatchTlsFiles(), asio::detached);
  if (options_.audit) asio::co_spawn(control_, RecordCountedRefusals(), asio::detached);
  for (auto& listener : listeners_) {
    spdlog::info("listening on {}", listener->description);
    asio::co_spawn(control_, AcceptLoop(*listener), asio::detached);
  }
  auto run_io = [this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("io thread: unexpected exception: {}", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < options_.io_threads; ++i) threads.emplace_back(run_io);
  run_io();
  for (auto& thread : threads) thread.join();
  // Blocking work in flight (a sandbox being created) finishes before the core shuts down.
  blocking_pool_.join();
  pull_pool_.join();  // cancelled by BeginShutdown: they end promptly
  if (signals_) {
    error_code ignored;
    signals_->cancel(ignored);
    reload_signals_->cancel(ignored);
  }
}

void ApiServer::WaitForReloadSignal() {
  reload_signals_->async_wait([this](const error_code& ec, int) {
    if (ec) return;  // cancelled: the server is done
    if (options_.tls)
      ReloadTls(false);
    else
      spdlog::info("received SIGHUP: no TLS certificate to load again");
    WaitForReloadSignal();
  });
}

asio::awaitable<void> ApiServer::WatchTlsFiles() {
  asio::steady_timer timer(control_);
  while (!stopping_) {
    timer.expires_after(kTlsFileCheckInterval);
    error_code ec;
    co_await timer.async_wait(Redirect(ec));
    if (ec || stopping_) co_return;
    ReloadTls(true);
  }
}

asio::awaitable<void> ApiServer::RecordCountedRefusals() {
  asio::steady_timer timer(control_);
  while (!stopping_) {
    timer.expires_after(std::chrono::seconds(10));
    error_code ec;
    co_await timer.async_wait(Redirect(ec));
    if (ec || stopping_) co_return;
    AppendCountedRefusals(UnixMillis());
  }
}

void ApiServer::AppendCountedRefusals(int64_t now_ms) {
  for (const RefusalBudget::Counted& counted : refusals_.TakeCounted(now_ms)) {
    core::AuditLog::Entry entry;
    entry.source = counted.source;
    entry.action = "refused keys";
    entry.outcome = 401;
    entry.detail = {{"refusals", counted.refusals},
                    {"since", Rfc3339Millis(counted.window_start_ms)},
                    {"why", fmt::format("past {} refused keys a minute from one address, they are counted",
                                        RefusalBudget::kPerWindow)}};
    if (auto written = options_.audit->Append(entry); !written.ok())
      spdlog::error("{} refused keys from {}: not in the audit log: {}", counted.refusals, counted.source,
                    written.error().message);
  }
}

void ApiServer::ReloadTls(bool changed_only) {
  Result<bool> reloaded = options_.tls->Reload(changed_only);
  if (!reloaded.ok())
    spdlog::error("TLS: {}; still serving the certificate loaded before", reloaded.error().message);
  else if (*reloaded)
    spdlog::info("TLS: certificate and key loaded again{}", changed_only ? " (their files changed)" : "");
}

void ApiServer::WaitForSignal() {
  signals_->async_wait([this](const error_code& ec, int signal) {
    if (ec) return;  // cancelled: the server is done
    // First signal: graceful shutdown. A second one: stop now.
    if (!stopping_) {
      spdlog::info("received {}, shutting down", SignalName(signal));
      BeginShutdown();
      WaitForSignal();
    } else {
      spdlog::warn("received {} again, stopping now", SignalName(signal));
      io_.stop();
    }
  });
}

void ApiServer::Stop() {
  asio::post(control_, [this] { BeginShutdown(); });
}

void ApiServer::BeginShutdown() {
  if (stopping_.exchange(true)) return;
  manager_.StopImagePulls();
  for (auto& listener : listeners_) {
    error_code ignored;
    listener->acceptor.close(ignored);
  }
  spdlog::info("stopped accepting connections; {} requests in flight", requests_in_flight_.load());
  asio::co_spawn(control_, Drain(), asio::detached);
}

asio::awaitable<void> ApiServer::Drain() {
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_grace;
  asio::steady_timer timer(control_);
  while (requests_in_flight_ > 0 && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(20));
    error_code ec;
    co_await timer.async_wait(Redirect(ec));
  }
  if (requests_in_flight_ > 0) {
    spdlog::warn("{} requests still running after the grace period; cutting them off",
                 requests_in_flight_.load());
  }
  if (options_.audit) AppendCountedRefusals(std::numeric_limits<int64_t>::max());  // what the last windows counted
  work_.reset();
  io_.stop();
}

asio::awaitable<void> ApiServer::AcceptLoop(Listener& listener) {
  asio::steady_timer pause(control_);
  while (!stopping_) {
    error_code ec;
    co_await listener.acceptor.async_wait(asio::socket_base::wait_read, Redirect(ec));
    if (stopping_ || !listener.acceptor.is_open()) co_return;
    if (ec) {
      spdlog::warn("{}: waiting for connections failed: {}", listener.description, ec.message());
      pause.expires_after(std::chrono::milliseconds(100));
      co_await pause.async_wait(Redirect(ec));
      continue;
    }
    // accept4 rather than asio's accept: the descriptor is close-on-exec from its first moment.
    for (;;) {
      const int fd = accept4(listener.acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        spdlog::warn("{}: accept: {}", listener.description, std::strerror(err));
        // Out of descriptors or memory: pause rather than spin on a listener that stays readable.
        pause.expires_after(std::chrono::milliseconds(100));
        co_await pause.async_wait(Redirect(ec));
        break;
      }
      if (listener.tcp) {
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      }
      // Each connection on its own strand: its coroutines never run concurrently.
      GenericProtocol::socket socket(asio::make_strand(io_));
      socket.assign(listener.protocol, fd, ec);
      if (ec) {
        close(fd);
        continue;
      }
      const std::string client = ClientAddress(fd);
      HttpStream stream(std::move(socket));
      auto executor = stream.get_executor();
      if (open_connections_.load() >= options_.max_connections) {
        // (Over TLS, in the clear: a client past the limit is told so by its TLS failing.)
        asio::co_spawn(executor, RejectConnection(std::move(stream)), asio::detached);
      } else if (listener.tcp && options_.tls) {
        ++open_connections_;
        asio::co_spawn(executor, ServeTls(std::move(stream), listener.e2b, client), asio::detached);
      } else {
        ++open_connections_;
        asio::co_spawn(executor, ServeConnection(std::move(stream), listener.e2b, client), asio::detached);
      }
    }
  }
}

asio::awaitable<void> ApiServer::RejectConnection(HttpStream stream) {
  spdlog::warn("connection limit ({}) reached; answering 503", options_.max_connections);
  co_await SendBareError(stream, http::status::service_unavailable, "unavailable",
                         "too many connections; retry later");
  error_code ignored;
  stream.socket().shutdown(asio::socket_base::shutdown_both, ignored);
  stream.close();
}

asio::awaitable<void> ApiServer::ServeTls(HttpStream stream, bool e2b, std::string client) {
  UniqueFd tcp(stream.socket().release());
  Result<UniqueFd> plain = co_await options_.tls->Wrap(io_.get_executor(), std::move(tcp), "", kTlsHandshakeTimeout);
  if (!plain.ok()) {
    --open_connections_;
    spdlog::debug("TLS connection from {}: {}", client, plain.error().message);
    co_return;
  }
  GenericProtocol::socket socket(stream.get_executor());
  error_code ec;
  socket.assign(GenericProtocol(AF_UNIX, 0), plain->get(), ec);
  if (ec) {
    --open_connections_;
    co_return;
  }
  plain->release();
  co_await ServeConnection(HttpStream(std::move(socket)), e2b, std::move(client));
}

asio::awaitable<void> ApiServer::ServeConnection(HttpStream stream, bool e2b, std::string client) {
  struct Counted {
    std::atomic<int64_t>& count;
    ~Counted() { --count; }
  } counted{open_connections_};
  // Kept across requests: bytes of a pipelined next request may already be in it.
  beast::flat_buffer buffer;
  try {
    while (!stopping_) {
      http::request_parser<http::empty_body> parser;
      parser.header_limit(kMaxHeaderBytes);
      // Each route sets its own limit before reading the body. (Not boost::none: Beast 1.74
      // compares a Content-Length against a disengaged limit as if it were 0.)
      parser.body_limit(std::numeric_limits<uint64_t>::max());
      error_code ec;
      stream.expires_after(kReadTimeout);
      co_await http::async_read_header(stream, buffer, parser, Redirect(ec));
      if (ec == http::error::header_limit) {
        co_await SendBareError(stream, http::status::request_header_fields_too_large, "headers_too_large",
                               fmt::format("request headers exceed {} bytes", kMaxHeaderBytes));
        break;
      }
      if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message) {
        co_await SendBareError(stream, http::status::bad_request, "bad_request",
                               "malformed HTTP request: " + ec.message());
        break;
      }
      if (ec) break;  // the client went away or was too slow
      struct InFlight {
        std::atomic<int64_t>& count;
        explicit InFlight(std::atomic<int64_t>& c) : count(c) { ++count; }
        ~InFlight() { --count; }
      } in_flight(requests_in_flight_);
      const bool go_on = co_await ServeRequest(stream, buffer, parser, e2b, client);
      if (!go_on) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("connection: unexpected exception: {}", e.what());
  }
  co_await CloseGracefully(stream);
}

std::optional<Caller> ApiServer::Authenticate(std::string_view authorization) const {
  if (options_.keys) return options_.keys->Authenticate(authorization);
  if (IsAuthorized(authorization, options_.api_key)) return Caller{};
  return std::nullopt;
}

asio::awaitable<bool> ApiServer::ServeRequest(HttpStream& stream, beast::flat_buffer& buffer,
                                              http::request_parser<http::empty_body>& parser, bool e2b,
                                              const std::string& client) {
  const auto started = std::chrono::steady_clock::now();
  HttpExchange exchange(stream, buffer, parser, stopping_, client);
  const std::string method(FromBeast(exchange.request().method_string()));
  const std::string target(FromBeast(exchange.request().target()));
  RouteMatch route;
  std::string failure;
  // The audit record (core/audit_log.h), made as the response starts: for a call of the API or
  // the E2B front that may change something (any method but GET and HEAD), and for a refused
  // key. Not for traffic to a sandbox's own server by host name, which needs no key (preview
  // hosts; the E2B front notes "app_port").
  core::AuditLog::Entry audit;
  // (One for the whole coroutine: g++ 12 gives same-named locals of sibling blocks one frame slot.)
  std::optional<Caller> caller;
  // A WebSocket upgrade opens a channel into a sandbox (a process's stdin, a TCP port): recorded
  // as a change, GET though it is.
  const bool mutating = (method != "GET" && method != "HEAD") || websocket::is_upgrade(exchange.request());
  auto record = [&](int status) {
    if (!options_.audit) return;
    const nlohmann::json& notes = exchange.notes();
    if (status != 401 && !(mutating && !audit.action.empty() && !notes.contains("app_port"))) return;
    audit.outcome = status;
    audit.source = client.empty() ? "unix" : client;
    if (status == 401 && !refusals_.Admit(audit.source, UnixMillis())) return;  // counted instead
    if (caller) audit.key = caller->key_id, audit.tenant = caller->tenant;
    for (const auto& [key, value] : notes.items()) {
      if (key == "target" && value.is_string()) audit.target = value;
      else audit.detail[key] = value;
    }
    // A refused client is recorded by what it asked for, without what it sent along (its query):
    // a client with no key must not be able to write text of its choice into the log.
    if (status == 401) {
      audit.key.clear();
      audit.detail = nlohmann::json::object();
    }
    if (auto written = options_.audit->Append(audit); !written.ok())
      spdlog::error("{} {}: not in the audit log: {}", method, WithoutPreviewTokenParam(target), written.error().message);
  };
  exchange.OnRespond(record);
  try {
    const std::optional<PreviewHost> preview =
        MatchPreviewHost(FromBeast(exchange.request()[http::field::host]), options_.preview_domain);
    std::optional<RequestTarget> parsed;
    if (e2b) {
      audit.key = "e2b";
      audit.action = "e2b " + method + " " + target.substr(0, target.find('?'));
      route.pattern = co_await e2b_->Handle(exchange, caller);
    } else if (preview) {
      // A sandbox's port by host name, without the API key: the id (a public preview) or the
      // preview token (a private one) is the capability, since preview URLs open in browsers.
      // Under such a name nothing but the port is reachable, the API least of all.
      route.pattern = "{port}-{id}.{preview_domain}";
      audit.action = method + " " + std::string(route.pattern);  // (recorded if its key is refused)
      audit.target = preview->sandbox_id;
      exchange.Note("app_port", preview->port);
      const std::string_view authorization = FromBeast(exchange.request()[http::field::authorization]);
      caller = Authenticate(authorization);
      co_await ServePreviewHost(exchange, manager_, *preview, caller);
    } else if (!(parsed = ParseTarget(target))) {
      co_await exchange.SendError(MakeError(ErrorCode::kBadRequest, "malformed request target"));
    } else {
      route = MatchRoute(method, parsed->path);
      const std::string_view authorization = FromBeast(exchange.request()[http::field::authorization]);
      caller = Authenticate(authorization);
      if (route.outcome == RouteMatch::Outcome::kMatched) {
        audit.action = method + " " + std::string(route.pattern);
        for (const char* name : {"id", "name", "snapshot_id"})
          if (!route.Param(name).empty()) audit.target = route.Param(name);
        for (const char* name : {"pid", "port"})
          if (!route.Param(name).empty()) audit.detail[name] = route.Param(name);
        for (const auto& [name, value] : parsed->query) audit.detail[name] = value;
      }
      Status allowed;
      if (route.NeedsAuth() && !caller) {
        exchange.SetResponseHeader(http::field::www_authenticate, "Bearer");
        co_await exchange.SendError(
            MakeError(ErrorCode::kUnauthorized, "missing or invalid API key (Authorization: Bearer <key>)"));
      } else if (caller && route.outcome == RouteMatch::Outcome::kMatched &&
                 !(allowed = AllowedByScope(*caller, route.id)).ok()) {
        co_await exchange.SendError(allowed.error());
      } else if (route.outcome == RouteMatch::Outcome::kNotFound) {
        co_await exchange.SendError(
            MakeError(ErrorCode::kNotFound, fmt::format("no route for {} {}", method, parsed->path)));
      } else if (route.outcome == RouteMatch::Outcome::kMethodNotAllowed) {
        exchange.SetResponseHeader(http::field::allow, route.allowed_methods);
        co_await exchange.SendError(MakeError(
            ErrorCode::kMethodNotAllowed,
            fmt::format("{} is not allowed on {}; use {}", method, route.pattern, route.allowed_methods)));
      } else {
        // (No key: GET /healthz alone; what it may reach is what read-only reaches of no tenant.)
        static const Caller kNoKey{.tenant = "", .scope = Scope::kReadOnly, .key_id = ""};
        co_await handlers_->Handle(exchange, route, parsed->query, caller ? *caller : kNoKey);
      }
    }
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  // Logged without the preview token a browser link may carry.
  const std::string logged_target = WithoutPreviewTokenParam(target);
  if (!failure.empty()) {
    spdlog::error("{} {}: unhandled exception: {}", method, logged_target, failure);
    exchange.set_keep_alive(false);
    if (!exchange.response_started()) {
      co_await exchange.SendError(MakeError(ErrorCode::kInternal, "internal error; see the daemon's log"));
    }
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // 499: the client went away before any response (nginx's convention).
  const int status = exchange.response_started() ? exchange.status() : 499;
  if (!exchange.response_started()) record(status);
  metrics_.Record(method, route.pattern, status, seconds);
  if (status >= 500 && status != 501) {
    spdlog::warn("{} {} -> {} ({:.1f} ms)", method, logged_target, status, seconds * 1000);
  } else {
    spdlog::debug("{} {} -> {} ({:.1f} ms)", method, logged_target, status, seconds * 1000);
  }
  co_return exchange.keep_alive() && !stopping_;
}

}  // namespace bulkhead::api
