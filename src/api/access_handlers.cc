// The tenant and key routes of ApiHandlers (handlers.h): tenants are the host admin's to make
// and remove (access.h); keys a tenant's admin makes and revokes for its own tenant.
#include <algorithm>

#include <fmt/format.h>

#include "api/handlers.h"
#include "common/time_format.h"

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

// POST /v1/tenants: {"name": ...}.
Result<std::string> ParseTenantCreate(const json& body) {
  BH_TRY(OnlyFields(body, {"name"}));
  if (!body.contains("name") || !body["name"].is_string()) return Invalid("\"name\" (a string) is required");
  return body["name"].get<std::string>();
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
  Result<std::string> name = ParseTenantCreate(*body);
  if (!name.ok()) co_return co_await exchange.SendError(name.error());
  if (Status created = context_.keys->CreateTenant(*name); !created.ok())
    co_return co_await exchange.SendError(created.error());
  exchange.Note("target", *name);
  json out = {{"name", *name}};
  for (const store::TenantRow& tenant : context_.keys->Tenants())
    if (tenant.name == *name) out["created_at"] = tenant.created_at;
  co_await exchange.SendJson(http::status::created, out);
}

asio::awaitable<void> ApiHandlers::ListTenants(HttpExchange& exchange) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  std::map<std::string, int64_t> sandboxes, snapshots;
  for (const core::SandboxInfo& sandbox : context_.manager.List(core::ListFilter{})) sandboxes[sandbox.spec.tenant]++;
  for (const core::SnapshotInfo& snapshot : context_.manager.ListSnapshots()) snapshots[snapshot.tenant]++;
  json tenants = json::array();
  for (const store::TenantRow& tenant : context_.keys->Tenants())
    tenants.push_back({{"name", tenant.name},
                       {"created_at", tenant.created_at},
                       {"sandboxes", sandboxes[tenant.name]},
                       {"snapshots", snapshots[tenant.name]}});
  const json body = {{"tenants", std::move(tenants)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ApiHandlers::DeleteTenant(HttpExchange& exchange, const std::string& name) {
  if (!context_.keys) co_return co_await exchange.SendError(NoAccessKeys());
  if (!context_.keys->HasTenant(name)) co_return co_await exchange.SendError(TenantNotFound(name));
  // What it owns goes first (its sandboxes deleted, its snapshots too): a tenant removed with
  // objects left would leave them reachable by no key but the host's.
  size_t sandboxes = context_.manager.List(core::ListFilter{.tenant = name}).size(), snapshots = 0;
  for (const core::SnapshotInfo& snapshot : context_.manager.ListSnapshots()) snapshots += snapshot.tenant == name;
  if (sandboxes || snapshots)
    co_return co_await exchange.SendError(MakeError(
        ErrorCode::kConflict,
        fmt::format("tenant {} still has {} sandboxes and {} snapshots: delete them first", name, sandboxes, snapshots),
        "tenant_not_empty"));
  if (Status removed = context_.keys->RemoveTenant(name); !removed.ok())
    co_return co_await exchange.SendError(removed.error());
  co_await exchange.SendNoContent();
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
