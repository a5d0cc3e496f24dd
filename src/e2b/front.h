// The E2B-compatible front (docs/e2b-compat.md): one listener that serves E2B's control-plane
// REST API and, for requests carrying E2b-Sandbox-Id (or a host name {port}-{id}.{domain}),
// the in-sandbox daemon protocol ("envd") and the sandbox's ports, so that the unmodified
// e2b SDKs run against bulkhead with E2B_API_URL and E2B_SANDBOX_URL pointed at it. It
// translates onto the same SandboxManager the bulkhead API uses; it keeps no state of its own
// but the envd watchers that the Python SDK polls.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/sandbox_manager.h"
#include "e2b/templates.h"
#include "e2b/watchers.h"
#include "http/http_exchange.h"
#include "http/request_target.h"
#include "service/access_keys.h"
#include "service/validate.h"

namespace bulkhead::e2b {

// The envd version the front reports: the SDKs turn features on by it (e2b-protocol.md §7).
// 0.5.7: octet-stream and gzip uploads and CloseStdin; not file metadata (0.6.2) nor a watch's
// includeEntry (0.6.3).
constexpr std::string_view kEnvdVersion = "0.6.4";
// The port envd listens on in an E2B sandbox; E2b-Sandbox-Port names it for envd traffic.
constexpr std::string_view kEnvdPort = "49983";

struct E2bContext {
  core::SandboxManager& manager;
  boost::asio::thread_pool& blocking_pool;  // for the manager's (blocking) calls
  std::string key;                          // the E2B API key (X-API-KEY): the host's admin
  api::AccessKeys* keys = nullptr;          // tenants' API keys, also taken as X-API-KEY; none: the key alone
  // The sandboxes' "domain": a request to this front for host {port}-{id}.{domain} goes to
  // that port of the sandbox (the SDKs' getHost), as E2B's proxy routes it.
  std::string domain;
  api::HostLimits host;
  // envd's CreateWatcher watchers, which outlive their requests (envd_filesystem.cc).
  std::shared_ptr<WatcherRegistry> watchers = std::make_shared<WatcherRegistry>();
  // Template builds (templates.h): run on the pull pool, their file sets spooled in and kept
  // under upload_dir (<state>/tmp, root's alone).
  boost::asio::thread_pool* pull_pool = nullptr;
  std::string upload_dir;
  std::shared_ptr<TemplateBuilds> templates = MakeTemplateBuilds();  // (the daemon's keeps them on disk)
};

class E2bFront {
 public:
  explicit E2bFront(E2bContext context) : context_(std::move(context)) {}

  // Answers one request. Answers a bounded label of what it was, for metrics and logs; sets
  // `caller` to who its X-API-KEY named, for the audit (none: traffic to a sandbox, or no key).
  boost::asio::awaitable<std::string_view> Handle(api::HttpExchange& exchange, std::optional<api::Caller>& caller);
  // Forgets what the front keeps in memory of a purged tenant: its template builds and their logs.
  void ForgetTenant(const std::string& tenant);

 private:
  E2bContext context_;
};

// The domain for a front listening on `listen` ("host:port", as --e2b-listen) and bound to
// `bound_port`: the host as written, but localhost for a loopback or wildcard address (an IP
// cannot carry the {port}-{id}. labels; *.localhost is the loopback), and the bound port.
std::string DefaultE2bDomain(std::string_view listen, uint16_t bound_port);

// E2B's error body {"code": <status>, "message"}: the SDKs read `code` to decide.
boost::asio::awaitable<void> SendE2bError(api::HttpExchange& exchange, int status, std::string_view message);
boost::asio::awaitable<void> SendE2bError(api::HttpExchange& exchange, const Error& error);

}  // namespace bulkhead::e2b
