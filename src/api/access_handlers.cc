// The tenant and key routes of ApiHandlers (handlers.h): tenants are the host admin's to make
// and remove (access.h); keys a tenant's admin makes and revokes for its own tenant.
#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/handlers.h"
#include "common/time_format.h"
#include "http/blocking.h"
#include "service/image_build.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

Error NoAccessKeys() { return MakeError(ErrorCode::kNotFound, "this daemon serves no tenants"); }

Error KeyNotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no key with id \"{}\"", id), "key_not_found");
}

Error TenantNotFound(const std::string& name) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no tenant named \"{}\"", name), "tenant_not_found");
}

json KeyToJson(const KeyInfo& key) {
  return {{"id", key.id},
          {"tenant", key.tenant},
          {"scope", ScopeName(key.scope)},
          {"name", key.name},
          {"created_at", key.created_at},
          {"expires_at", key.expires_at_ms ? json(Rfc3339Millis(key.expires_at_ms)) : json(nullptr)},
          {"revoked_at", key.revoked_at_ms ? json(Rfc3339Millis(key.revoked_at_ms)) : json(nullptr)}};
}

Error Invalid(const std::string& what) { return MakeError(ErrorCode::kInvalid, what); }

Status OnlyFields(const json& body, std::initializer_list<std::string_view> known) {
  for (auto it = body.begin(); it != body.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      return Invalid("unknown field \"" + it.key() + "\"");
  return {};
}

struct TenantRequest {
  std::string name;
  core::TenantQuota quota;
  std::optional<core::TenantEgress> egress;  // absent: the tenant's stay as they are
};

constexpr size_t kMaxTenantDenyEntries = 100;

// "egress": {"default": a network object or null, "deny": [...]}, or null for none. Each entry
// is checked as a sandbox's policy's are. It replaces the tenant's rules whole.
Result<core::TenantEgress> ParseTenantEgress(const json& value) {
  if (value.is_null()) return core::TenantEgress{};
  Result<core::TenantEgress> egress = core::TenantEgressFromJson(value);
  if (!egress.ok()) return egress.error();
  if (egress->deny.size() > kMaxTenantDenyEntries)
    return Invalid(fmt::format("egress.deny takes at most {} entries", kMaxTenantDenyEntries));
  if (!egress->deny.empty()) {
    Result<core::NetworkPolicy> checked = ParseNetworkUpdate(json{{"mode", "allowlist"}, {"deny", egress->deny}});
    if (!checked.ok()) return Invalid("egress.deny: " + checked.error().message);
  }
  if (egress->default_policy) {
    Result<core::NetworkPolicy> checked = ParseNetworkUpdate(value["default"]);
    if (!checked.ok()) return Invalid("egress.default: " + checked.error().message);
    egress->default_policy = *checked;
  }
  return egress;
}

// "quotas" (merged into `quota`: null removes one) and "egress" (in place of the tenant's
// rules), where the body has them.
Status ReadTenantSettings(const json& body, TenantRequest& request) {
  if (body.contains("quotas")) {
    Result<core::TenantQuota> quota = core::PatchQuota(request.quota, body["quotas"]);
    if (!quota.ok()) return quota.error();
    request.quota = *quota;
  }
  if (body.contains("egress")) {
    Result<core::TenantEgress> egress = ParseTenantEgress(body["egress"]);
    if (!egress.ok()) return egress.error();
    request.egress = *egress;
  }
  return {};
}

// POST /v1/tenants: {"name": ..., "quotas": {...}, "egress": {...}}.
Result<TenantRequest> ParseTenantCreate(const json& body) {
  BH_TRY(OnlyFields(body, {"name", "quotas", "egress"}));
  if (!body.contains("name") || !body["name"].is_string()) return Invalid("\"name\" (a string) is required");
  TenantRequest request{body["name"].get<std::string>()};
  BH_TRY(ReadTenantSettings(body, request));
  return request;
}

// PATCH /v1/tenants/{tenant}: {"quotas": {...}} merged into the tenant's, and/or {"egress": {...}}.
Result<TenantRequest> ParseTenantUpdate(const json& body, const core::TenantQuota& current) {
  BH_TRY(OnlyFields(body, {"quotas", "egress"}));
  if (!body.contains("quotas") && !body.contains("egress")) return Invalid("\"quotas\" or \"egress\" is required");
  TenantRequest request{"", current};
  BH_TRY(ReadTenantSettings(body, request));
  return request;
}

// The Tenant object: its name, what it owns, its quotas and what it holds of them (`usage`:
// SandboxManager::UsageByTenant's).
json DescribeTenant(const store::TenantRow& tenant, core::SandboxManager& manager,
                    const std::map<std::string, core::Amounts>& usage) {
  int64_t snapshots = 0;
  for (const core::SnapshotInfo& snapshot : manager.ListSnapshots()) snapshots += snapshot.tenant == tenant.name;
  auto held = usage.find(tenant.name);
  return {{"name", tenant.name},
          {"created_at", tenant.created_at},
          {"sandboxes", manager.List(core::ListFilter{.tenant = tenant.name}).size()},  // in any state
          {"snapshots", snapshots},
          {"quotas", core::QuotaToJson(manager.Quota(tenant.name))},
          {"egress", core::TenantEgressToJson(manager.TenantEgressOf(tenant.name))},
          {"usage", core::AmountsToJson(held == usage.end() ? core::Amounts{} : held->second)}};
}

struct KeyRequest {
  std::string tenant, name;
  Scope scope = Scope::kUser;
  int64_t ttl_s = 0;
};

// POST /v1/keys: {"tenant", "scope", "name", "ttl_s"}. A tenant's admin names its own tenant
// or none; another tenant is one it does not know of.
Result<KeyRequest> ParseKeyCreate(const json& body, const Caller& caller) {
  BH_TRY(OnlyFields(body, {"tenant", "scope", "name", "ttl_s"}));
  KeyRequest request{caller.tenant};
  if (body.contains("tenant")) {
    if (!body["tenant"].is_string()) return Invalid("\"tenant\" is a string");
    request.tenant = body["tenant"].get<std::string>();
    if (!caller.HostAdmin() && request.tenant != caller.tenant) return TenantNotFound(request.tenant);
  }
  if (request.tenant.empty()) return Invalid("\"tenant\" is required: the host's own key is its only admin key");
  if (!body.contains("scope") || !body["scope"].is_string())
    return Invalid("\"scope\" is required: tenant-admin, user or read-only");
  const std::optional<Scope> scope = ParseScope(body["scope"].get<std::string>());
  if (!scope || *scope == Scope::kAdmin) return Invalid("\"scope\" is tenant-admin, user or read-only");
  request.scope = *scope;
  if (body.contains("name")) {
    if (!body["name"].is_string()) return Invalid("\"name\" is a string");
    request.name = body["name"].get<std::string>();
  }
  if (body.contains("ttl_s")) {
    if (!body["ttl_s"].is_number_integer()) return Invalid("\"ttl_s\" is an integer");
    request.ttl_s = body["ttl_s"].get<int64_t>();
  }
  return request;
}

}  // namespace

asio::awaitable<void> ApiHandlers::CreateTenant(HttpExchange& exchange) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<TenantRequest> request = ParseTenantCreate(*body);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  exchange.Note("target", request->name);
  // Blocking (SQLite writes). The tenant has no key yet: nothing of it can come before its quota.
  Status created = co_await RunBlocking(context_.blocking_pool, [&]() -> Status {
    if (!context_.keys->HasTenant(request->name)) ForgetLeftovers(request->name);
    BH_TRY(context_.keys->CreateTenant(request->name));
    Status set = context_.manager.SetQuota(request->name, request->quota);
    if (set.ok() && request->egress) set = context_.manager.SetTenantEgress(request->name, *request->egress);
    if (!set.ok()) {
      (void)context_.manager.SetQuota(request->name, {});
      (void)context_.keys->RemoveTenant(request->name);
    }
    return set;
  });
  if (!created.ok()) co_return co_await exchange.SendError(created.error());
  co_await SendTenant(exchange, http::status::created, request->name);
}

asio::awaitable<void> ApiHandlers::ListTenants(HttpExchange& exchange) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  const std::map<std::string, core::Amounts> usage = context_.manager.UsageByTenant();
  json tenants = json::array();
  for (const store::TenantRow& tenant : context_.keys->Tenants())
    tenants.push_back(DescribeTenant(tenant, context_.manager, usage));
  const json body = {{"tenants", std::move(tenants)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::GetTenant(HttpExchange& exchange, const std::string& name, const Caller& caller) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  if (!caller.HostAdmin() && name != caller.tenant) co_return co_await exchange.SendError(TenantNotFound(name));
  co_await SendTenant(exchange, http::status::ok, name);
}

asio::awaitable<void> ApiHandlers::UpdateTenant(HttpExchange& exchange, const std::string& name) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  if (!context_.keys->HasTenant(name)) co_return co_await exchange.SendError(TenantNotFound(name));
  exchange.Note("target", name);
  Result<TenantRequest> update = ParseTenantUpdate(*body, context_.manager.Quota(name));
  if (!update.ok()) co_return co_await exchange.SendError(update.error());
  Status set = co_await RunBlocking(context_.blocking_pool, [&]() -> Status {
    BH_TRY(context_.manager.SetQuota(name, update->quota));
    if (update->egress) BH_TRY(context_.manager.SetTenantEgress(name, *update->egress));
    return {};
  });
  if (!set.ok()) co_return co_await exchange.SendError(set.error());
  co_await SendTenant(exchange, http::status::ok, name);
}

asio::awaitable<void> ApiHandlers::SendTenant(HttpExchange& exchange, http::status status, const std::string& name) {
  std::optional<store::TenantRow> row;
  for (const store::TenantRow& tenant : context_.keys->Tenants())
    if (tenant.name == name) row = tenant;
  if (!row) co_return co_await exchange.SendError(TenantNotFound(name));
  const json body = DescribeTenant(*row, context_.manager, context_.manager.UsageByTenant());
  co_await exchange.SendJson(status, body);
}

asio::awaitable<void> ApiHandlers::DeleteTenant(HttpExchange& exchange, const std::string& name,
                                              const QueryParams& query) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  const std::string* purge_param = QueryParam(query, "purge");
  if (purge_param && *purge_param != "true" && *purge_param != "false")
    co_return co_await exchange.SendError(Invalid("purge is true or false"));
  if (!context_.keys->HasTenant(name)) co_return co_await exchange.SendError(TenantNotFound(name));
  exchange.Note("target", name);
  if (purge_param && *purge_param == "true") {
    Result<json> proof = co_await RunBlocking(context_.blocking_pool, [&] { return PurgeTenant(name); });
    if (!proof.ok()) co_return co_await exchange.SendError(proof.error());
    exchange.Note("purged", (*proof)["removed_counts"]);
    co_return co_await exchange.SendJson(http::status::ok, *proof);
  }
  // What it owns goes first (its sandboxes deleted, its snapshots and volumes too): a tenant
  // removed with objects left would leave them reachable by no key but the host's.
  const std::string owned = co_await RunBlocking(context_.blocking_pool, [&] { return Owned(name); });
  if (!owned.empty())
    co_return co_await exchange.SendError(
        MakeError(ErrorCode::kConflict,
                  fmt::format("tenant {} still has {}: delete them first, or purge it "
                              "(?purge=true, bulkhead tenant rm --purge)",
                              name, owned),
                  "tenant_not_empty"));
  if (Status removed = context_.keys->RemoveTenant(name); !removed.ok())  // its quota row too
    co_return co_await exchange.SendError(removed.error());
  // A tenant made again with this name starts with no quota and no egress rules.
  (void)context_.manager.SetQuota(name, {});
  (void)context_.manager.SetTenantEgress(name, {});
  co_await exchange.SendNoContent();
}

void ApiHandlers::ForgetLeftovers(const std::string& tenant) {
  core::SandboxManager& manager = context_.manager;
  for (const core::SandboxInfo& sandbox : manager.List(core::ListFilter{.tenant = tenant}))
    (void)manager.Delete(sandbox.id);
  for (const core::SnapshotInfo& snapshot : manager.ListSnapshots())
    if (snapshot.tenant == tenant) (void)manager.DeleteSnapshot(snapshot.id);
  for (const core::VolumeInfo& volume : manager.ListVolumes())
    if (volume.tenant == tenant) (void)manager.DeleteVolume({.tenant = tenant, .name = volume.name});
  for (const core::ImageInfo& image : manager.ListImages()) {
    if (image.name == "host" || !storage::HoldsImage(image, tenant)) continue;
    if (Status released = manager.DeleteImage(image.name, tenant); !released.ok())
      spdlog::warn("image {} left by a tenant {} gone before: {}", image.name, tenant, released.error().message);
  }
  RemoveTemplateFiles(context_.upload_dir, tenant);
}

std::string ApiHandlers::Owned(const std::string& tenant) {
  core::SandboxManager& manager = context_.manager;
  const size_t sandboxes = manager.List(core::ListFilter{.tenant = tenant}).size();
  size_t snapshots = 0, volumes = 0, images = 0;
  for (const core::SnapshotInfo& snapshot : manager.ListSnapshots()) snapshots += snapshot.tenant == tenant;
  for (const core::VolumeInfo& volume : manager.ListVolumes()) volumes += volume.tenant == tenant;
  for (const core::ImageInfo& image : manager.ListImages()) images += storage::HoldsImage(image, tenant);
  if (sandboxes + snapshots + volumes + images == 0) return "";
  return fmt::format("{} sandboxes, {} snapshots, {} volumes and {} images", sandboxes, snapshots, volumes, images);
}

Result<json> ApiHandlers::PurgeTenant(const std::string& name) {
  core::SandboxManager& manager = context_.manager;
  json keys = json::array(), sandboxes = json::array(), snapshots = json::array(), volumes = json::array(),
       images = json::array();
  // Its keys first: nothing new of the tenant's can start while the rest goes.
  for (const KeyInfo& key : context_.keys->Keys(name)) {
    BH_TRY(context_.keys->Revoke(key.id));
    keys.push_back(key.id);
  }
  int64_t egress_records = 0;
  for (const core::SandboxInfo& sandbox : manager.List(core::ListFilter{.tenant = name})) {
    if (auto egress = manager.Egress(sandbox.id, 1'000'000); egress.ok()) egress_records += static_cast<int64_t>(egress->size());
    Status deleted = manager.Delete(sandbox.id);  // its files, layer, egress log, usage history
    if (!deleted.ok() && deleted.error().code != ErrorCode::kNotFound) return deleted.error();
    sandboxes.push_back({{"id", sandbox.id}, {"state", sandbox.state}, {"created_at", sandbox.created_at}});
  }
  // A snapshot that a create from it (started before the keys went) still reads, or a volume
  // that a sandbox made meanwhile mounts, is retried for up to 5 s; past that the purge fails,
  // saying what is left (run it again).
  for (int attempt = 0;; ++attempt) {
    bool busy = false;
    for (const core::VolumeInfo& volume : manager.ListVolumes()) {
      if (volume.tenant != name) continue;
      Status deleted = manager.DeleteVolume({.tenant = name, .name = volume.name});  // its files
      if (deleted.ok() || deleted.error().code == ErrorCode::kNotFound) {
        volumes.push_back({{"name", volume.name}, {"size_mb", volume.size_mb}, {"used_bytes", volume.used_bytes},
                           {"created_at", volume.created_at}});
      } else if (deleted.error().code == ErrorCode::kConflict) {
        busy = true;
      } else {
        return deleted.error();
      }
    }
    for (const core::SnapshotInfo& snapshot : manager.ListSnapshots()) {
      if (snapshot.tenant != name) continue;
      Status deleted = manager.DeleteSnapshot(snapshot.id);
      if (deleted.ok() || deleted.error().code == ErrorCode::kNotFound) {
        snapshots.push_back({{"id", snapshot.id}, {"size_bytes", snapshot.size_bytes}, {"created_at", snapshot.created_at}});
      } else if (deleted.error().code == ErrorCode::kConflict) {
        busy = true;
      } else {
        return deleted.error();
      }
    }
    // Its images (after the sandboxes that ran them): those only it held go with their files;
    // of one that others stored too, its hold and its names go, the content staying theirs.
    for (const core::ImageInfo& image : manager.ListImages()) {
      if (image.name == "host" || !storage::HoldsImage(image, name)) continue;
      const bool others = image.shared || image.tenants.size() > 1;
      Status deleted = manager.DeleteImage(image.name, name);
      if (deleted.ok() || deleted.error().code == ErrorCode::kNotFound) {
        images.push_back({{"name", image.name}, {"references", image.tenants.at(name)},
                          {"size_bytes", image.size_bytes}, {"files_removed", !others}});
      } else if (deleted.error().code == ErrorCode::kConflict) {
        busy = true;
      } else {
        return deleted.error();
      }
    }
    // Sandboxes a create in flight made meanwhile go too.
    for (const core::SandboxInfo& sandbox : manager.List(core::ListFilter{.tenant = name})) {
      (void)manager.Delete(sandbox.id);
      sandboxes.push_back({{"id", sandbox.id}, {"state", sandbox.state}, {"created_at", sandbox.created_at}});
      busy = true;
    }
    if (!busy) break;
    if (attempt == 50)
      return MakeError(ErrorCode::kConflict,
                       fmt::format("tenant {} is not purged: its sandboxes, snapshots, volumes or images are still in use; its "
                                   "keys are "
                                   "revoked, so ask again",
                                   name),
                       "tenant_not_empty");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const json quota = core::QuotaToJson(manager.Quota(name));
  const json egress_rules = core::TenantEgressToJson(manager.TenantEgressOf(name));
  BH_TRY(manager.SetQuota(name, {}));
  BH_TRY(manager.SetTenantEgress(name, {}));
  BH_TRY(context_.keys->RemoveTenant(name));  // its key rows, its row
  // The file sets its E2B template builds uploaded, and those builds' logs.
  const size_t template_files = RemoveTemplateFiles(context_.upload_dir, name);
  context_.forget_tenant(name);
  // Its audit records are blanked in place (the chain holds; core/audit_log.h); this purge's
  // own record, written as it is answered, stays.
  size_t audit_records = 0;
  if (context_.audit) {
    Result<size_t> erased = context_.audit->Erase(name);
    if (!erased.ok()) return erased.error();
    audit_records = *erased;
  }
  // The proof: what is left of it, counted again now it is gone.
  size_t left_snapshots = 0, left_volumes = 0, left_images = 0;
  for (const core::SnapshotInfo& snapshot : manager.ListSnapshots()) left_snapshots += snapshot.tenant == name;
  for (const core::VolumeInfo& volume : manager.ListVolumes()) left_volumes += volume.tenant == name;
  for (const core::ImageInfo& image : manager.ListImages()) left_images += storage::HoldsImage(image, name);
  const json remaining = {{"sandboxes", manager.List(core::ListFilter{.tenant = name}).size()},
                          {"snapshots", left_snapshots},
                          {"volumes", left_volumes},
                          {"images", left_images},
                          {"keys", context_.keys->Keys(name).size()},
                          {"tenant", context_.keys->HasTenant(name)}};
  const json counts = {{"sandboxes", sandboxes.size()}, {"snapshots", snapshots.size()},
                       {"volumes", volumes.size()},     {"images", images.size()},
                       {"template_file_sets", template_files},
                       {"keys", keys.size()},
                       {"egress_records", egress_records}, {"audit_records", audit_records}};
  return json{{"tenant", name},
              {"removed", {{"sandboxes", std::move(sandboxes)},
                           {"snapshots", std::move(snapshots)},
                           {"volumes", std::move(volumes)},
                           {"images", std::move(images)},
                           {"template_file_sets", template_files},
                           {"keys", std::move(keys)},
                           {"quota", quota},
                           {"egress_rules", egress_rules},
                           {"egress_records", egress_records},
                           {"audit_records", audit_records}}},
              {"removed_counts", counts},
              {"remaining", remaining},
              {"kept", {{"audit", "this purge's own record; in place of each of the tenant's records a blank one keeping the "
                                  "hash chain (its seq, time and hashes) and naming the erase record that accounts for it"},
                        {"images", "the files of an image the host or another tenant stored too (files_removed false): "
                                   "theirs, got by their own pulls or builds; the tenant's hold and names on it are gone"}}}};
}

asio::awaitable<void> ApiHandlers::CreateKey(HttpExchange& exchange, const Caller& caller) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<KeyRequest> request = ParseKeyCreate(*body, caller);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  if (!context_.keys->HasTenant(request->tenant)) co_return co_await exchange.SendError(TenantNotFound(request->tenant));
  Result<NewKey> made = context_.keys->CreateKey(request->tenant, request->scope, request->name, request->ttl_s);
  if (!made.ok()) co_return co_await exchange.SendError(made.error());
  exchange.Note("target", made->info.id);
  json out = KeyToJson(made->info);
  out["key"] = made->secret;
  co_await exchange.SendJson(http::status::created, out);
}

asio::awaitable<void> ApiHandlers::ListKeys(HttpExchange& exchange, const Caller& caller) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  json keys = json::array();
  for (const KeyInfo& key : context_.keys->Keys(caller.tenant)) keys.push_back(KeyToJson(key));
  const json body = {{"keys", std::move(keys)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::RevokeKey(HttpExchange& exchange, const std::string& id, const Caller& caller) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  const std::optional<KeyInfo> key = context_.keys->Key(id);
  if (!key || (!caller.HostAdmin() && key->tenant != caller.tenant)) co_return co_await exchange.SendError(KeyNotFound(id));
  if (Status revoked = context_.keys->Revoke(id); !revoked.ok()) co_return co_await exchange.SendError(revoked.error());
  co_await exchange.SendNoContent();
}

}  // namespace bulkhead::api
