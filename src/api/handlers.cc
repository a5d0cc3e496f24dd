#include "api/handlers.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <string_view>

#include <fmt/format.h>

#include "api/exec_handler.h"
#include "api/file_handler.h"
#include "api/image_handlers.h"
#include "service/image_build.h"
#include "service/image_transfer.h"
#include "api/json_output.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "http/blocking.h"
#include "http/json_text.h"
#include "service/make_directory.h"
#include "service/port_proxy.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

// The OpenAPI document, embedded at build time from src/api/openapi.json.
extern const std::string_view kOpenApiJson;

namespace {

namespace asio = boost::asio;
using nlohmann::json;

Error VolumeNotFound(const std::string& name) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no volume named \"{}\"", name), "volume_not_found");
}

}  // namespace

bool ApiHandlers::ReachesSandbox(const Caller& caller, const std::string& id) {
  if (caller.HostAdmin() || !IsValidSandboxId(id)) return true;
  const std::optional<std::string> tenant = context_.manager.TenantOf(id);  // (one being deleted too)
  return !tenant || *tenant == caller.tenant;
}

Result<std::string> ApiHandlers::TenantNamed(const Caller& caller, const json* named) {
  if (named == nullptr || named->is_null()) return caller.tenant;
  if (!named->is_string()) return MakeError(ErrorCode::kInvalid, "tenant is a string");
  const std::string tenant = named->get<std::string>();
  const bool known = context_.keys && context_.keys->HasTenant(tenant);
  if (!known || (!caller.HostAdmin() && tenant != caller.tenant))
    return MakeError(ErrorCode::kNotFound, fmt::format("no tenant named \"{}\"", tenant), "tenant_not_found");
  return tenant;
}

Result<std::string> ApiHandlers::TenantQueried(const Caller& caller, const QueryParams& query) {
  const std::string* named = QueryParam(query, "tenant");
  if (named == nullptr) return caller.tenant;
  const json value = *named;
  return TenantNamed(caller, &value);
}

bool ApiHandlers::ReachesSnapshot(const Caller& caller, const std::string& id) {
  if (caller.HostAdmin() || !IsValidSandboxId(id)) return true;
  Result<core::SnapshotInfo> found = context_.manager.GetSnapshot(id);
  return !found.ok() || found->tenant == caller.tenant;
}

asio::awaitable<void> ApiHandlers::Handle(HttpExchange& exchange, const RouteMatch& route,
                                          const QueryParams& query, const Caller& caller) {
  // (Distinct names: g++ 12 gives same-named locals of sibling blocks one coroutine frame slot.)
  const std::string sandbox_id(route.Param("id")), snapshot_id(route.Param("snapshot_id"));
  if (!sandbox_id.empty() && !ReachesSandbox(caller, sandbox_id))
    co_return co_await exchange.SendError(SandboxNotFound(sandbox_id));
  if (!snapshot_id.empty() && !ReachesSnapshot(caller, snapshot_id))
    co_return co_await exchange.SendError(SnapshotNotFound(snapshot_id));
  switch (route.id) {
    case RouteId::kHealthz: co_return co_await Healthz(exchange);
    case RouteId::kMetrics: co_return co_await Metrics(exchange);
    case RouteId::kOpenApi: co_return co_await OpenApi(exchange);
    case RouteId::kCreateSandbox: co_return co_await CreateSandbox(exchange, caller);
    case RouteId::kListSandboxes: co_return co_await ListSandboxes(exchange, query, caller);
    case RouteId::kGetSandbox: co_return co_await GetSandbox(exchange, route.Param("id"));
    case RouteId::kDeleteSandbox: co_return co_await DeleteSandbox(exchange, route.Param("id"));
    case RouteId::kSetSandboxTimeout: co_return co_await SetSandboxTimeout(exchange, route.Param("id"));
    case RouteId::kPauseSandbox:
    case RouteId::kResumeSandbox:
    case RouteId::kStopSandbox:
    case RouteId::kStartSandbox: co_return co_await ChangeLifecycle(exchange, route.Param("id"), route.id);
    case RouteId::kSetNetwork: co_return co_await SetNetwork(exchange, route.Param("id"));
    case RouteId::kEgress: co_return co_await Egress(exchange, route.Param("id"), query);
    case RouteId::kExec: co_return co_await Exec(exchange, route.Param("id"));
    case RouteId::kListImages: co_return co_await ListImages(exchange, query, caller);
    case RouteId::kPutImage: co_return co_await PutImage(exchange, route.Param("name"), query, caller);
    case RouteId::kDeleteImage: co_return co_await DeleteImage(exchange, route.Param("name"), query, caller);
    case RouteId::kGetImage: co_return co_await GetImage(exchange, route.Param("name"), query, caller);
    case RouteId::kPullImage:
    case RouteId::kPushImage: {
      const TenantOfBody tenant_of = [this, &caller](const json* named) { return TenantNamed(caller, named); };
      const bool ndjson = WantsNdjson(FromBeast(exchange.request()[http::field::accept]));
      if (route.id == RouteId::kPullImage)
        co_return co_await ServePull(exchange, context_.manager, context_.pull_pool, tenant_of, ndjson);
      co_return co_await ServePush(exchange, context_.manager, context_.pull_pool, tenant_of, ndjson);
    }
    case RouteId::kBuildImage: {
      Result<std::string> builder = TenantQueried(caller, query);
      if (!builder.ok()) co_return co_await exchange.SendError(builder.error());
      co_return co_await ServeBuild(exchange, context_.manager, context_.pull_pool, context_.upload_dir, query,
                                    *builder, WantsNdjson(FromBeast(exchange.request()[http::field::accept])));
    }
    case RouteId::kPruneBuildCache: {
      core::SandboxManager& manager = context_.manager;
      const std::string upload_dir = context_.upload_dir;
      const std::pair<size_t, size_t> deleted = co_await RunBlocking(context_.blocking_pool, [&] {
        return std::pair{PruneBuildCache(manager, 0), PruneTemplateFiles(upload_dir, 0)};
      });
      const json body = {{"deleted", deleted.first}, {"file_sets_deleted", deleted.second}};
      co_return co_await exchange.SendJson(http::status::ok, body);
    }
    case RouteId::kCollectImageGarbage: co_return co_await CollectImageGarbage(exchange);
    case RouteId::kCreateVolume: co_return co_await CreateVolume(exchange, caller);
    case RouteId::kListVolumes: co_return co_await ListVolumes(exchange, query, caller);
    case RouteId::kAudit: co_return co_await Audit(exchange, query);
    case RouteId::kGetVolume: co_return co_await GetVolume(exchange, route.Param("name"), query, caller);
    case RouteId::kDeleteVolume: co_return co_await DeleteVolume(exchange, route.Param("name"), query, caller);
    case RouteId::kReadFile:
    case RouteId::kWriteFile:
    case RouteId::kDeleteFile:
    case RouteId::kStatFile:
    case RouteId::kListFiles:
    case RouteId::kMakeDirectory:
    case RouteId::kMoveFile:
    case RouteId::kDownloadArchive:
    case RouteId::kUploadArchive:
    case RouteId::kWatchFiles:
      co_return co_await ServeFiles(exchange, context_.manager, route.id, route.Param("id"), query);
    case RouteId::kCreateProcess:
    case RouteId::kListProcesses:
    case RouteId::kGetProcess:
    case RouteId::kProcessOutput:
    case RouteId::kProcessStdin:
    case RouteId::kProcessStdinClose:
    case RouteId::kProcessSignal:
    case RouteId::kProcessResize:
    case RouteId::kProcessAttach:
      co_return co_await processes_.Handle(exchange, route, query);
    case RouteId::kPortProxy: {
      // The path after /ports/{port}, as the client encoded it, plus the query.
      const PortProxyRequest request{.sandbox_id = route.Param("id"),
                                     .port = route.Param("port"),
                                     .app_target = PortProxyAppTarget(FromBeast(exchange.request().target()))};
      co_return co_await ServePortProxy(exchange, context_.manager, request);
    }
    case RouteId::kCreateSnapshot: co_return co_await CreateSnapshot(exchange, route.Param("id"));
    case RouteId::kForkSandbox: co_return co_await ForkSandbox(exchange, route.Param("id"));
    case RouteId::kListSnapshots: co_return co_await ListSnapshots(exchange, caller);
    case RouteId::kGetSnapshot: co_return co_await GetSnapshot(exchange, route.Param("snapshot_id"));
    case RouteId::kDeleteSnapshot: co_return co_await DeleteSnapshot(exchange, route.Param("snapshot_id"));
    case RouteId::kExportSnapshot: co_return co_await ExportSnapshot(exchange, route.Param("snapshot_id"));
    case RouteId::kImportSnapshot: co_return co_await ImportSnapshot(exchange, query);
    case RouteId::kTcpForward:
      co_return co_await ServeTcpForward(exchange, context_.manager, route.Param("id"), route.Param("port"));
    case RouteId::kCreateTenant: co_return co_await CreateTenant(exchange);
    case RouteId::kListTenants: co_return co_await ListTenants(exchange);
    case RouteId::kGetTenant: co_return co_await GetTenant(exchange, route.Param("tenant"), caller);
    case RouteId::kUpdateTenant: co_return co_await UpdateTenant(exchange, route.Param("tenant"));
    case RouteId::kDeleteTenant: co_return co_await DeleteTenant(exchange, route.Param("tenant"), query);
    case RouteId::kCreateKey: co_return co_await CreateKey(exchange, caller);
    case RouteId::kListKeys: co_return co_await ListKeys(exchange, caller);
    case RouteId::kRevokeKey: co_return co_await RevokeKey(exchange, route.Param("key_id"), caller);
    case RouteId::kNotImplemented: co_return co_await NotImplemented(exchange, route);
  }
  co_await exchange.SendError(MakeError(ErrorCode::kInternal, "unhandled route"));
}

asio::awaitable<void> ApiHandlers::Healthz(HttpExchange& exchange) {
  json body = {{"status", "ok"}, {"version", BULKHEAD_VERSION}};
  body["listen"] = context_.tcp_addresses ? context_.tcp_addresses() : std::vector<std::string>();
  body["preview_domain"] = context_.preview_domain;
  if (const std::string e2b = context_.e2b_address ? context_.e2b_address() : ""; !e2b.empty()) {
    body["e2b_address"] = e2b;
  }
  json runtimes = json::object();
  for (const core::RuntimeInfo& runtime : context_.manager.Runtimes()) {
    json entry = {{"available", runtime.available}};
    if (!runtime.available) entry["reason"] = runtime.why;
    if (runtime.available) entry["memory_snapshots"] = runtime.memory_snapshots;
    for (const auto& [key, value] : runtime.details) entry[key] = value;
    runtimes[runtime.name] = std::move(entry);
  }
  body["runtimes"] = std::move(runtimes);
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::Metrics(HttpExchange& exchange) {
  std::string text = context_.metrics.Render(context_.manager.Stats(), context_.open_connections());
  if (context_.keys) {
    const std::map<std::string, core::Amounts> usage = context_.manager.UsageByTenant();
    std::vector<TenantMetrics> tenants;
    for (const store::TenantRow& tenant : context_.keys->Tenants()) {
      auto held = usage.find(tenant.name);
      tenants.push_back({tenant.name, context_.manager.Quota(tenant.name),
                         held == usage.end() ? core::Amounts{} : held->second});
    }
    AppendTenantMetrics(text, tenants);
  }
  co_await exchange.SendText(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
}

asio::awaitable<void> ApiHandlers::OpenApi(HttpExchange& exchange) {
  co_await exchange.SendText(http::status::ok, "application/json", std::string(kOpenApiJson));
}

asio::awaitable<void> ApiHandlers::CreateSandbox(HttpExchange& exchange, const Caller& caller) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<core::SandboxSpec> spec = ParseSandboxSpec(*body, context_.host);
  if (!spec.ok()) co_return co_await exchange.SendError(spec.error());
  // "tenant": the host's key makes a sandbox of a tenant's (which then reaches it as its own,
  // and mounts that tenant's volumes); a tenant's key may name its own only.
  const auto named = body->find("tenant");
  Result<std::string> tenant = TenantNamed(caller, named == body->end() ? nullptr : &*named);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  spec->tenant = *tenant;
  // A create that names no network policy gets its tenant's default one, if it has one.
  if (const auto network = body->find("network"); network == body->end() || network->is_null())
    if (auto rules = context_.manager.TenantEgressOf(spec->tenant); rules.default_policy)
      spec->network = *rules.default_policy;
  if (!spec->tenant.empty()) {
    // Its files come from its own tenant's snapshots only, whoever asks.
    const Caller owner{.tenant = spec->tenant, .scope = Scope::kUser};
    if (spec->from_snapshot && !ReachesSnapshot(owner, *spec->from_snapshot))
      co_return co_await exchange.SendError(SnapshotNotFound(*spec->from_snapshot));
  }
  core::SandboxManager& manager = context_.manager;
  Status image = co_await PrepareCreateImage(manager, context_.pull_pool, *body, *spec);
  if (!image.ok()) co_return co_await exchange.SendError(image.error());
  Result<core::SandboxInfo> created =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.Create(*spec); });
  if (!created.ok()) co_return co_await exchange.SendError(created.error());
  // A workdir of the caller's own is made (by root) if missing, as `docker run -w` does;
  // the image's /workspace always exists. One that cannot be made fails the create.
  if (created->spec.workdir != "/workspace") {
    Status made = co_await MakeDirectoryInside(manager, created->id, created->spec.workdir, "root");
    if (!made.ok()) {
      const std::string id = created->id;
      (void)co_await RunBlocking(context_.blocking_pool, [&] { return manager.Delete(id); });
      co_return co_await exchange.SendError(MakeError(
          ErrorCode::kInvalid, "workdir " + created->spec.workdir + " cannot be made: " + made.error().message,
          "invalid_workdir"));
    }
  }
  co_await exchange.SendJson(http::status::created, SandboxToJson(*created));
}

asio::awaitable<void> ApiHandlers::ListSandboxes(HttpExchange& exchange, const QueryParams& query,
                                                 const Caller& caller) {
  Result<core::ListFilter> filter = ParseListFilter(query);
  if (!filter.ok()) co_return co_await exchange.SendError(filter.error());
  if (!caller.HostAdmin()) filter->tenant = caller.tenant;
  json sandboxes = json::array();
  for (const core::SandboxInfo& sandbox : context_.manager.List(*filter)) {
    sandboxes.push_back(SandboxToJson(sandbox));
  }
  const json body = {{"sandboxes", std::move(sandboxes)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::GetSandbox(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  Result<core::SandboxInfo> sandbox = context_.manager.Get(id);
  if (!sandbox.ok()) co_return co_await exchange.SendError(sandbox.error());
  co_await exchange.SendJson(http::status::ok, SandboxToJson(*sandbox));
}

asio::awaitable<void> ApiHandlers::DeleteSandbox(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  core::SandboxManager& manager = context_.manager;
  Status deleted = co_await RunBlocking(context_.blocking_pool, [&] { return manager.Delete(id); });
  if (!deleted.ok()) co_return co_await exchange.SendError(deleted.error());
  co_await exchange.SendNoContent();
}

asio::awaitable<void> ApiHandlers::SetSandboxTimeout(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<int64_t> timeout_s = ParseTimeoutUpdate(*body);
  if (!timeout_s.ok()) co_return co_await exchange.SendError(timeout_s.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::SandboxInfo> sandbox =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.SetTimeout(id, *timeout_s); });
  if (!sandbox.ok()) co_return co_await exchange.SendError(sandbox.error());
  co_await exchange.SendJson(http::status::ok, SandboxToJson(*sandbox));
}

asio::awaitable<void> ApiHandlers::ChangeLifecycle(HttpExchange& exchange, const std::string& id, RouteId route) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  bool to_disk = false;
  if (route == RouteId::kPauseSandbox) {
    // A body is optional: {"to_disk": true} pauses to disk.
    Result<std::string> body = co_await exchange.ReadBody(kMaxJsonBody);
    if (!body.ok()) co_return co_await exchange.SendError(body.error());
    if (body->find_first_not_of(" \t\r\n") != std::string::npos) {
      Result<json> parsed = ParseJsonObject(*body);
      if (!parsed.ok()) co_return co_await exchange.SendError(parsed.error());
      Result<bool> asked = ParsePauseRequest(*parsed);
      if (!asked.ok()) co_return co_await exchange.SendError(asked.error());
      to_disk = *asked;
    }
  }
  core::SandboxManager& manager = context_.manager;
  Result<core::SandboxInfo> sandbox = co_await RunBlocking(context_.blocking_pool, [&] {
    switch (route) {
      case RouteId::kPauseSandbox: return to_disk ? manager.PauseToDisk(id) : manager.Pause(id);
      case RouteId::kResumeSandbox: return manager.Resume(id);
      case RouteId::kStopSandbox: return manager.Stop(id);
      default: return manager.Start(id);
    }
  });
  if (!sandbox.ok()) co_return co_await exchange.SendError(sandbox.error());
  co_await exchange.SendJson(http::status::ok, SandboxToJson(*sandbox));
}

asio::awaitable<void> ApiHandlers::SetNetwork(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<core::NetworkPolicy> policy = ParseNetworkUpdate(*body);
  if (!policy.ok()) co_return co_await exchange.SendError(policy.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::SandboxInfo> sandbox =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.SetNetwork(id, *policy); });
  if (!sandbox.ok()) co_return co_await exchange.SendError(sandbox.error());
  co_await exchange.SendJson(http::status::ok, SandboxToJson(*sandbox));
}

asio::awaitable<void> ApiHandlers::Egress(HttpExchange& exchange, const std::string& id, const QueryParams& query) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  Result<int64_t> limit = ParseEgressLimit(query);
  if (!limit.ok()) co_return co_await exchange.SendError(limit.error());
  core::SandboxManager& manager = context_.manager;
  Result<std::vector<net::EgressRecord>> records =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.Egress(id, *limit); });
  if (!records.ok()) co_return co_await exchange.SendError(records.error());
  json entries = json::array();
  for (const net::EgressRecord& record : *records) entries.push_back(net::EgressRecordToJson(record));
  const json response = {{"entries", std::move(entries)}};
  co_await exchange.SendJson(http::status::ok, response);
}

asio::awaitable<void> ApiHandlers::Exec(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxExecBody);
  if (!body) co_return;
  if (auto cmd = body->find("cmd"); cmd != body->end()) exchange.Note("cmd", *cmd);  // (the audit's)
  Result<ExecOptions> options = ParseExecOptions(*body);
  if (!options.ok()) co_return co_await exchange.SendError(options.error());
  body.reset();  // stdin may be large; do not keep two copies while the command runs
  // Chunked encoding needs HTTP/1.1; an HTTP/1.0 client gets the one-shot result.
  const bool stream = exchange.request().version() >= 11 &&
                      WantsNdjson(FromBeast(exchange.request()[http::field::accept]));
  co_await ServeExec(exchange, context_.manager, id, std::move(options.value()), stream);
}

asio::awaitable<void> ApiHandlers::ListImages(HttpExchange& exchange, const QueryParams& query, const Caller& caller) {
  Result<std::string> tenant = TenantQueried(caller, query);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  const bool everyone = caller.HostAdmin() && QueryParam(query, "tenant") == nullptr;
  core::SandboxManager& manager = context_.manager;
  // (meta.json files read, and the host image measured: off the io thread)
  const std::vector<core::ImageInfo> stored = co_await RunBlocking(context_.blocking_pool, [&] { return manager.ListImages(); });
  json images = json::array();
  for (const core::ImageInfo& image : stored) {
    if (everyone) images.push_back(ImageToJson(image));
    else if (storage::SeesImage(image, *tenant)) images.push_back(ImageToJson(storage::ImageSeenBy(image, *tenant)));
  }
  const json body = {{"images", std::move(images)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::PutImage(HttpExchange& exchange, const std::string& name, const QueryParams& query,
                                           const Caller& caller) {
  if (!IsValidImageName(name)) {
    co_return co_await exchange.SendError(
        MakeError(ErrorCode::kInvalid, "image name must match ^[a-z0-9][a-z0-9._-]{0,63}$"));
  }
  Result<std::string> tenant = TenantQueried(caller, query);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  Result<core::ImageInfo> image = co_await ImportUploadedImage(exchange, name, *tenant);
  if (!image.ok()) co_return co_await exchange.SendError(image.error());
  co_await exchange.SendJson(http::status::created, ImageToJson(*image));
}

asio::awaitable<Result<core::ImageInfo>> ApiHandlers::ImportUploadedImage(HttpExchange& exchange,
                                                                         const std::string& name,
                                                                         const std::string& tenant) {
  // The tarball goes to disk as it arrives, never into memory; the core unpacks it from
  // there. The spool file is gone when this returns, whatever happened.
  std::string temp_path = context_.upload_dir + "/upload-XXXXXX";
  UniqueFd fd(mkostemp(temp_path.data(), O_CLOEXEC));
  if (!fd) co_return SystemError("create upload file", errno);
  ScopeGuard remove_temp([&temp_path] { unlink(temp_path.c_str()); });

  Result<uint64_t> received = co_await exchange.ReadBodyToFile(fd.get(), kMaxImageUpload);
  if (!received.ok()) co_return received.error();
  if (*received == 0) {
    co_return MakeError(ErrorCode::kInvalid,
                        "the body must be a tar archive (optionally compressed) of the image's root");
  }
  fd.reset();
  core::SandboxManager& manager = context_.manager;
  co_return co_await RunBlocking(context_.blocking_pool, [&] { return manager.ImportImage(name, temp_path, tenant); });
}

asio::awaitable<void> ApiHandlers::GetImage(HttpExchange& exchange, const std::string& name, const QueryParams& query,
                                           const Caller& caller) {
  Result<std::string> tenant = TenantQueried(caller, query);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::ImageInfo> image =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.FindImage(name, *tenant); });
  if (!image.ok()) co_return co_await exchange.SendError(image.error());
  const json body = ImageToJson(*image);
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::CollectImageGarbage(HttpExchange& exchange) {
  core::SandboxManager& manager = context_.manager;
  Result<std::optional<int64_t>> freed =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.CollectImageGarbage(); });
  if (!freed.ok()) co_return co_await exchange.SendError(freed.error());
  const json body = {{"freed_bytes", freed->value_or(0)}, {"deferred", !freed->has_value()}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::DeleteImage(HttpExchange& exchange, const std::string& name,
                                              const QueryParams& query, const Caller& caller) {
  Result<std::string> tenant = TenantQueried(caller, query);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  core::SandboxManager& manager = context_.manager;
  Status deleted = co_await RunBlocking(context_.blocking_pool, [&] { return manager.DeleteImage(name, *tenant); });
  if (!deleted.ok()) co_return co_await exchange.SendError(deleted.error());
  co_await exchange.SendNoContent();
}

asio::awaitable<void> ApiHandlers::CreateVolume(HttpExchange& exchange, const Caller& caller) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<VolumeRequest> request = ParseVolumeRequest(*body);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  // A tenant's key makes its tenant's; the host's its own, or a tenant's it names.
  const auto for_tenant = body->find("tenant");
  Result<std::string> tenant = TenantNamed(caller, for_tenant == body->end() ? nullptr : &*for_tenant);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  const storage::VolumeKey key{.tenant = *tenant, .name = request->name};
  core::SandboxManager& manager = context_.manager;
  Result<core::VolumeInfo> volume =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.CreateVolume(key, request->size_mb); });
  if (!volume.ok()) co_return co_await exchange.SendError(volume.error());
  co_await exchange.SendJson(http::status::created, VolumeToJson(*volume));
}

asio::awaitable<void> ApiHandlers::Audit(HttpExchange& exchange, const QueryParams& query) {
  if (!context_.audit) co_return co_await exchange.SendError(MakeError(ErrorCode::kNotFound, "this daemon keeps no audit log"));
  Result<core::AuditLog::Filter> filter = ParseAuditFilter(query);
  if (!filter.ok()) co_return co_await exchange.SendError(filter.error());
  core::AuditLog& audit = *context_.audit;
  Result<std::vector<json>> records = co_await RunBlocking(context_.blocking_pool, [&] { return audit.Read(*filter); });
  if (!records.ok()) co_return co_await exchange.SendError(records.error());
  // "next": the `after` of the next page, while this one came back full.
  json next = records->size() == filter->limit ? json(records->back()["seq"]) : json(nullptr);
  const json body = {{"records", std::move(*records)}, {"next", std::move(next)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::ListVolumes(HttpExchange& exchange, const QueryParams& query,
                                               const Caller& caller) {
  // A tenant's key lists its tenant's; the host's every tenant's, or one tenant's (?tenant=).
  Result<std::string> tenant = TenantQueried(caller, query);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  const bool everyone = caller.HostAdmin() && QueryParam(query, "tenant") == nullptr;
  core::SandboxManager& manager = context_.manager;
  // Usage figures may walk a tree (no quotas): off the io thread.
  std::vector<core::VolumeInfo> volumes =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.ListVolumes(); });
  json entries = json::array();
  for (const core::VolumeInfo& volume : volumes)
    if (everyone || volume.tenant == *tenant) entries.push_back(VolumeToJson(volume));
  const json body = {{"volumes", std::move(entries)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::GetVolume(HttpExchange& exchange, const std::string& name,
                                             const QueryParams& query, const Caller& caller) {
  if (!IsValidVolumeName(name)) co_return co_await exchange.SendError(VolumeNotFound(name));
  Result<std::string> tenant = TenantQueried(caller, query);  // the host's key names a tenant's with ?tenant=
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  const storage::VolumeKey key{.tenant = *tenant, .name = name};
  core::SandboxManager& manager = context_.manager;
  Result<core::VolumeInfo> volume =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.GetVolume(key); });
  if (!volume.ok()) co_return co_await exchange.SendError(volume.error());
  co_await exchange.SendJson(http::status::ok, VolumeToJson(*volume));
}

asio::awaitable<void> ApiHandlers::DeleteVolume(HttpExchange& exchange, const std::string& name,
                                                const QueryParams& query, const Caller& caller) {
  if (!IsValidVolumeName(name)) co_return co_await exchange.SendError(VolumeNotFound(name));
  Result<std::string> tenant = TenantQueried(caller, query);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  const storage::VolumeKey key{.tenant = *tenant, .name = name};
  core::SandboxManager& manager = context_.manager;
  Status deleted = co_await RunBlocking(context_.blocking_pool, [&] { return manager.DeleteVolume(key); });
  if (!deleted.ok()) co_return co_await exchange.SendError(deleted.error());
  co_await exchange.SendNoContent();
}

asio::awaitable<void> ApiHandlers::NotImplemented(HttpExchange& exchange, const RouteMatch& route) {
  // An unknown sandbox is 404 here as on every other route, so clients see one behaviour.
  if (const std::string& id = route.Param("id"); !id.empty()) {
    if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
    Result<core::SandboxInfo> sandbox = context_.manager.Get(id);
    if (!sandbox.ok()) co_return co_await exchange.SendError(sandbox.error());
  }
  const json body = {{"error",
                      {{"code", "not_implemented"},
                       {"message", fmt::format("{} is not implemented yet", route.pattern)}}}};
  co_await exchange.SendJson(http::status::not_implemented, body);
}

}  // namespace bulkhead::api
