// The route handlers: each parses and validates its request, calls the core and answers.
// Authentication and routing happened before (server.cc).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "api/metrics.h"
#include "api/process_handlers.h"
#include "api/router.h"
#include "core/audit_log.h"
#include "core/sandbox_manager.h"
#include "http/http_exchange.h"
#include "service/access_keys.h"
#include "service/validate.h"

namespace bulkhead::api {

constexpr uint64_t kMaxImageUpload = uint64_t{16} << 30;  // 16 GiB

struct HandlerContext {
  core::SandboxManager& manager;
  boost::asio::thread_pool& blocking_pool;  // for the manager's (blocking) calls
  boost::asio::thread_pool& pull_pool;      // image pulls, which may take minutes
  HttpMetrics& metrics;
  std::string upload_dir;                   // <state>/tmp: image uploads land here
  HostLimits host;
  std::function<int64_t()> open_connections;
  // For GET /healthz, so clients can build port URLs: the bound TCP addresses ("host:port")
  // and the preview domain of host-name routing.
  std::function<std::vector<std::string>()> tcp_addresses;
  std::function<std::string()> e2b_address;  // the E2B front's "host:port", "" without one
  std::string preview_domain;
  core::AuditLog* audit = nullptr;  // GET /v1/audit; none: 404
  AccessKeys* keys = nullptr;       // tenants and their keys; none: the routes answer 404
  // What a purge must also erase outside the manager: the E2B front's memory of the tenant.
  std::function<void(const std::string& tenant)> forget_tenant = [](const std::string&) {};
};

class ApiHandlers {
 public:
  explicit ApiHandlers(HandlerContext context) : context_(std::move(context)) {}

  // Answers one routed request (route.outcome == kMatched) of `caller` (whose key's scope
  // allows the route: access.h). Another tenant's sandbox or snapshot answers as an unknown
  // one does.
  boost::asio::awaitable<void> Handle(HttpExchange& exchange, const RouteMatch& route,
                                      const QueryParams& query, const Caller& caller);

 private:
  boost::asio::awaitable<void> Healthz(HttpExchange& exchange);
  boost::asio::awaitable<void> Metrics(HttpExchange& exchange);
  boost::asio::awaitable<void> OpenApi(HttpExchange& exchange);
  boost::asio::awaitable<void> CreateSandbox(HttpExchange& exchange, const Caller& caller);
  boost::asio::awaitable<void> ListSandboxes(HttpExchange& exchange, const QueryParams& query, const Caller& caller);
  // Whether the sandbox or snapshot `id` is the caller's to reach (unknown ones are: their
  // handler answers 404 as ever).
  bool ReachesSandbox(const Caller& caller, const std::string& id);
  bool ReachesSnapshot(const Caller& caller, const std::string& id);
  // The tenant a call names ("tenant" in its body, or ?tenant=), or the caller's own: the host's
  // key may name any tenant, a tenant's key its own only (else 404 tenant_not_found).
  Result<std::string> TenantNamed(const Caller& caller, const nlohmann::json* named);
  Result<std::string> TenantQueried(const Caller& caller, const QueryParams& query);
  // Tenants and keys (access_handlers.cc).
  boost::asio::awaitable<void> CreateTenant(HttpExchange& exchange);
  boost::asio::awaitable<void> ListTenants(HttpExchange& exchange);
  boost::asio::awaitable<void> GetTenant(HttpExchange& exchange, const std::string& name, const Caller& caller);
  boost::asio::awaitable<void> UpdateTenant(HttpExchange& exchange, const std::string& name);
  // Removes every sandbox (with its files and egress log), snapshot, volume, key and quota of
  // the tenant, then the tenant; answers what went and what is left of it (nothing). Blocking.
  Result<nlohmann::json> PurgeTenant(const std::string& name);
  // "2 sandboxes, 0 snapshots and 1 volumes" the tenant still owns, or "" if none. Blocking.
  std::string Owned(const std::string& tenant);
  // What a tenant of this name, purged or removed before, may have left: sandboxes, snapshots,
  // volumes, images and template file sets a call still under way as it went made (a pull
  // takes minutes). A tenant made again with the name starts with none of it. (blocking)
  void ForgetLeftovers(const std::string& tenant);
  // The Tenant object, with its quotas and usage.
  boost::asio::awaitable<void> SendTenant(HttpExchange& exchange, http::status status, const std::string& name);
  // ?purge=true: everything the tenant owns goes first, and the answer lists it (PurgeTenant).
  boost::asio::awaitable<void> DeleteTenant(HttpExchange& exchange, const std::string& name, const QueryParams& query);
  boost::asio::awaitable<void> CreateKey(HttpExchange& exchange, const Caller& caller);
  boost::asio::awaitable<void> ListKeys(HttpExchange& exchange, const Caller& caller);
  boost::asio::awaitable<void> RevokeKey(HttpExchange& exchange, const std::string& id, const Caller& caller);
  boost::asio::awaitable<void> GetSandbox(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> DeleteSandbox(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> SetSandboxTimeout(HttpExchange& exchange, const std::string& id);
  // POST .../pause, resume, stop, start: no body (an empty JSON object is accepted too).
  boost::asio::awaitable<void> ChangeLifecycle(HttpExchange& exchange, const std::string& id, RouteId route);
  boost::asio::awaitable<void> SetNetwork(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> Egress(HttpExchange& exchange, const std::string& id, const QueryParams& query);
  boost::asio::awaitable<void> Exec(HttpExchange& exchange, const std::string& id);
  // Images: a tenant's key acts on its tenant's (and sees the host's); the host's key on the
  // host's, or on a tenant's with ?tenant= (and lists every holder's without it).
  boost::asio::awaitable<void> ListImages(HttpExchange& exchange, const QueryParams& query, const Caller& caller);
  boost::asio::awaitable<void> GetImage(HttpExchange& exchange, const std::string& name, const QueryParams& query,
                                        const Caller& caller);
  boost::asio::awaitable<void> CollectImageGarbage(HttpExchange& exchange);
  boost::asio::awaitable<void> PutImage(HttpExchange& exchange, const std::string& name, const QueryParams& query,
                                        const Caller& caller);
  boost::asio::awaitable<Result<core::ImageInfo>> ImportUploadedImage(HttpExchange& exchange, const std::string& name,
                                                                      const std::string& tenant);
  boost::asio::awaitable<void> DeleteImage(HttpExchange& exchange, const std::string& name, const QueryParams& query,
                                           const Caller& caller);
  boost::asio::awaitable<void> CreateVolume(HttpExchange& exchange, const Caller& caller);
  boost::asio::awaitable<void> ListVolumes(HttpExchange& exchange, const QueryParams& query, const Caller& caller);
  boost::asio::awaitable<void> Audit(HttpExchange& exchange, const QueryParams& query);
  boost::asio::awaitable<void> GetVolume(HttpExchange& exchange, const std::string& name, const QueryParams& query,
                                         const Caller& caller);
  boost::asio::awaitable<void> DeleteVolume(HttpExchange& exchange, const std::string& name,
                                            const QueryParams& query, const Caller& caller);
  // Snapshots and forks (snapshot_handlers.cc).
  boost::asio::awaitable<void> CreateSnapshot(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> ForkSandbox(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> ListSnapshots(HttpExchange& exchange, const Caller& caller);
  boost::asio::awaitable<void> GetSnapshot(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> DeleteSnapshot(HttpExchange& exchange, const std::string& id);
  // Export and import as .tar.zst, spooled through a file in upload_dir.
  boost::asio::awaitable<void> ExportSnapshot(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> ImportSnapshot(HttpExchange& exchange, const QueryParams& query);
  boost::asio::awaitable<void> NotImplemented(HttpExchange& exchange, const RouteMatch& route);

  HandlerContext context_;
  ProcessHandlers processes_{context_.manager};
};

}  // namespace bulkhead::api
