// The HTTP/1.1 server of the daemon: listeners (TCP and unix socket), one coroutine per
// connection on its own strand, authentication, routing, metrics and graceful shutdown.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "api/handlers.h"
#include "api/metrics.h"
#include "common/result.h"
#include "common/tls_relay.h"
#include "daemon/refusal_budget.h"
#include "core/sandbox_manager.h"
#include "e2b/front.h"
#include "http/http_exchange.h"

namespace bulkhead::api {

struct ServerOptions {
  std::string api_key;  // required: every route but GET /healthz needs it
  int io_threads = 2;
  int blocking_threads = 4;
  std::string upload_dir;  // where image uploads are spooled (<state>/tmp)
  int64_t max_connections = 4096;  // beyond: 503 and close
  // On shutdown, how long requests in flight may take to finish.
  std::chrono::milliseconds shutdown_grace{5000};
  bool handle_signals = false;  // SIGINT/SIGTERM begin the shutdown
  // Requests for host {port}-{id}.{preview_domain} go to that sandbox's port, without the
  // API key. Empty = no host routing.
  std::string preview_domain = "localhost:7420";
  // The E2B front's key (X-API-KEY); needed before ListenE2b.
  std::string e2b_key;
  // The E2B sandboxes' domain (e2b::E2bContext::domain); "" = e2b::DefaultE2bDomain.
  std::string e2b_domain;
  // Where every call that may change something is recorded (core/audit_log.h); none if null.
  core::AuditLog* audit = nullptr;
  // Tenants' keys beside api_key (service/access_keys.h); none: api_key alone.
  AccessKeys* keys = nullptr;
  // TLS on every TCP listener (the API's and the E2B front's); none: plain HTTP. The unix
  // socket stays plain (root-only).
  std::shared_ptr<TlsEndpoint> tls;
};

class ApiServer {
 public:
  ApiServer(core::SandboxManager& manager, ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // "host:port" ("127.0.0.1:7420", "[::1]:0", "localhost:7420"). Answers the bound
  // address (useful with port 0). Call before Run.
  Result<boost::asio::ip::tcp::endpoint> ListenTcp(const std::string& host_port);
  // A unix socket at `path`, mode 0600. A stale socket file is replaced; a live one (another
  // daemon answering on it) is an error. Call before Run.
  Status ListenUnix(const std::string& path);
  // "host:port" for the E2B-compatible front (src/e2b/front.h) instead of the API. Call before Run.
  Result<boost::asio::ip::tcp::endpoint> ListenE2b(const std::string& host_port);

  // Serves until Stop() (or a signal), then stops accepting, lets requests in flight
  // finish (up to shutdown_grace), waits for blocking work and returns.
  void Run();
  // Begins the shutdown; callable from any thread, also before Run.
  void Stop();

 private:
  // The caller the Authorization header value names (api_key or a tenant's key), if any.
  std::optional<Caller> Authenticate(std::string_view authorization) const;
  struct Listener;

  boost::asio::awaitable<void> AcceptLoop(Listener& listener);
  // `e2b`: the connection came to the E2B front's listener. `client`: its IP address, "" over
  // the unix socket.
  boost::asio::awaitable<void> ServeConnection(HttpStream stream, bool e2b, std::string client);
  // A connection to a TCP listener with TLS on: its TLS ended (common/tls_relay.h), then served.
  boost::asio::awaitable<void> ServeTls(HttpStream stream, bool e2b, std::string client);
  boost::asio::awaitable<void> RejectConnection(HttpStream stream);
  // Serves one request whose header was read; answers whether the connection may go on.
  boost::asio::awaitable<bool> ServeRequest(HttpStream& stream, beast::flat_buffer& buffer,
                                            http::request_parser<http::empty_body>& parser, bool e2b,
                                            const std::string& client);
  void WaitForSignal();  // on control_
  // SIGHUP loads the TLS certificate and key again; so does a change to either file, looked
  // for every few seconds. A failed load keeps the ones in use. On control_.
  void WaitForReloadSignal();
  boost::asio::awaitable<void> WatchTlsFiles();
  void ReloadTls(bool changed_only);
  // Every few seconds, and once at the end: the refusals RefusalBudget counted without a
  // record of their own, one record per source. On control_.
  boost::asio::awaitable<void> RecordCountedRefusals();
  void AppendCountedRefusals(int64_t now_ms);
  void BeginShutdown();  // on control_
  boost::asio::awaitable<void> Drain();

  core::SandboxManager& manager_;
  ServerOptions options_;
  HttpMetrics metrics_;
  std::atomic<int64_t> open_connections_{0};
  std::atomic<int64_t> requests_in_flight_{0};
  std::atomic<bool> stopping_{false};
  RefusalBudget refusals_;
  std::unique_ptr<ApiHandlers> handlers_;
  std::unique_ptr<e2b::E2bFront> e2b_;  // with an E2B listener only

  // Destroyed in reverse: listeners and the pool go before the io_context (whose
  // destruction frees suspended connection coroutines), which goes before the state above.
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::strand<boost::asio::io_context::executor_type> control_;  // listeners, signals, shutdown
  boost::asio::thread_pool blocking_pool_;
  boost::asio::thread_pool pull_pool_{2};  // image pulls: long, kept off blocking_pool_
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::string> tcp_addresses_;  // bound "host:port"s; written before Run only
  std::string e2b_address_;                 // the E2B front's bound "host:port"; before Run only
  std::unique_ptr<boost::asio::signal_set> signals_;
  std::unique_ptr<boost::asio::signal_set> reload_signals_;  // SIGHUP
};

}  // namespace bulkhead::api
