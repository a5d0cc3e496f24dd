#include "cli/tenant_commands.h"

#include <ctime>
#include <vector>

#include <fmt/format.h>

#include "cli/command_line.h"
#include "cli/output_format.h"
#include "client/api_client.h"
#include "client/server_url.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

// DELETE `prefix` + each name; prints each one done.
int RemoveEach(Session& session, const std::string& prefix, const std::vector<std::string>& names) {
  int exit_code = 0;
  for (const std::string& name : names) {
    auto removed = session.api.Call(HttpMethod::kDelete, prefix + PercentEncode(name));
    if (!removed.ok()) {
      exit_code = session.Fail(removed.error());
      continue;
    }
    session.Out(name + "\n");
  }
  return exit_code;
}

std::string OrDash(const json& value) { return value.is_string() ? value.get<std::string>() : "-"; }

// --quota KEY=VALUE...: {"KEY": VALUE}, "none" as null (the daemon checks names and values).
Result<json> QuotaPatch(const std::vector<std::string>& assignments) {
  json quotas = json::object();
  for (const std::string& text : assignments) {
    auto pair = ParseKeyValue(text, false);
    if (!pair.ok()) return pair.error();
    const std::string& value = *pair->second;
    if (value == "none") {
      quotas[pair->first] = nullptr;
      continue;
    }
    const json number = json::parse(value, nullptr, false);
    if (!number.is_number())
      return MakeError(ErrorCode::kBadRequest, "quota " + pair->first + ": '" + value + "' is not a number or none",
                       "invalid_argument");
    quotas[pair->first] = number;
  }
  return quotas;
}

std::string Figure(const json& value) {
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number()) return DumpJson(value, -1);
  return "-";
}

// RESOURCE USED QUOTA, for every resource the usage names.
int PrintTenant(Session& session, const json& tenant) {
  if (session.line.json) {
    session.Out(DumpJson(tenant, 2) + "\n");
    return 0;
  }
  const json quotas = tenant.value("quotas", json::object());
  std::vector<std::vector<std::string>> rows = {{"RESOURCE", "USED", "QUOTA"}};
  const json usage = tenant.value("usage", json::object());
  for (const auto& [resource, used] : usage.items())
    rows.push_back({resource, Figure(used), quotas.contains(resource) ? Figure(quotas[resource]) : "-"});
  session.Out(FormatTable(rows));
  // Its egress rules, when it has any.
  auto joined = [](const json& list) {
    std::string out;
    for (const json& entry : list) out += (out.empty() ? "" : ", ") + entry.get<std::string>();
    return out.empty() ? std::string("-") : out;
  };
  const json egress = tenant.value("egress", json::object());
  if (const json policy = egress.value("default", json()); policy.is_object())
    session.Out("egress default: " + policy.value("mode", "none") + "; allow " + joined(policy.value("allow", json::array())) +
                "; deny " + joined(policy.value("deny", json::array())) + "\n");
  if (egress.contains("deny")) session.Out("egress deny (every sandbox): " + joined(egress["deny"]) + "\n");
  return 0;
}

}  // namespace

int TenantCreateCommand(Session& session) {
  const CommandLine& line = session.line;
  json body = {{"name", line.tenant_names.at(0)}};
  if (!line.tenant_quotas.empty()) {
    auto quotas = QuotaPatch(line.tenant_quotas);
    if (!quotas.ok()) return session.Fail(quotas.error());
    body["quotas"] = *quotas;
  }
  auto tenant = session.api.Call(HttpMethod::kPost, "/v1/tenants", body);
  if (!tenant.ok()) return session.Fail(tenant.error());
  session.Out(line.json ? DumpJson(*tenant, 2) + "\n" : line.tenant_names.at(0) + "\n");
  return 0;
}

int TenantListCommand(Session& session) {
  auto listing = session.api.Call(HttpMethod::kGet, "/v1/tenants");
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows = {{"NAME", "SANDBOXES", "SNAPSHOTS", "CREATED"}};
  for (const json& tenant : listing->value("tenants", json::array()))
    rows.push_back({tenant.value("name", ""), std::to_string(tenant.value("sandboxes", int64_t{0})),
                    std::to_string(tenant.value("snapshots", int64_t{0})),
                    DescribeCreated(tenant.value("created_at", ""), now)});
  session.Out(FormatTable(rows));
  return 0;
}

int TenantShowCommand(Session& session) {
  auto tenant = session.api.Call(HttpMethod::kGet, "/v1/tenants/" + PercentEncode(session.line.tenant_name));
  if (!tenant.ok()) return session.Fail(tenant.error());
  return PrintTenant(session, *tenant);
}

int TenantQuotaCommand(Session& session) {
  auto quotas = QuotaPatch(session.line.tenant_quotas);
  if (!quotas.ok()) return session.Fail(quotas.error());
  auto tenant = session.api.Call(HttpMethod::kPatch, "/v1/tenants/" + PercentEncode(session.line.tenant_name),
                                 json{{"quotas", *quotas}});
  if (!tenant.ok()) return session.Fail(tenant.error());
  return PrintTenant(session, *tenant);
}

int TenantEgressCommand(Session& session) {
  const CommandLine& line = session.line;
  json rules = nullptr;
  if (!line.tenant_egress_clear) {
    if (line.tenant_egress_mode.empty() && line.tenant_egress_deny.empty())
      return session.Fail(MakeError(ErrorCode::kBadRequest, "give --mode (with --allow), --deny, or --clear", "usage"));
    rules = json::object();
    if (!line.tenant_egress_mode.empty())
      rules["default"] = {{"mode", line.tenant_egress_mode}, {"allow", line.tenant_egress_allow}};
    if (!line.tenant_egress_deny.empty()) rules["deny"] = line.tenant_egress_deny;
  }
  auto tenant = session.api.Call(HttpMethod::kPatch, "/v1/tenants/" + PercentEncode(line.tenant_name),
                                 json{{"egress", rules}});
  if (!tenant.ok()) return session.Fail(tenant.error());
  return PrintTenant(session, *tenant);
}

int TenantRemoveCommand(Session& session) {
  if (!session.line.tenant_purge) return RemoveEach(session, "/v1/tenants/", session.line.tenant_names);
  int exit_code = 0;
  for (const std::string& name : session.line.tenant_names) {
    auto proof = session.api.Call(HttpMethod::kDelete, "/v1/tenants/" + PercentEncode(name) + "?purge=true");
    if (!proof.ok()) {
      exit_code = session.Fail(proof.error());
      continue;
    }
    if (session.line.json) {
      session.Out(DumpJson(*proof, 2) + "\n");
      continue;
    }
    const json removed = proof->value("removed", json::object()), left = proof->value("remaining", json::object());
    int64_t bytes = 0;
    for (const json& snapshot : removed.value("snapshots", json::array())) bytes += snapshot.value("size_bytes", int64_t{0});
    session.Out(fmt::format("purged {}: removed {} sandboxes, {} snapshots ({} bytes), {} volumes, {} keys, {} egress "
                            "records, {} audit records (blanked in the chain); left: {} sandboxes, {} snapshots, {} "
                            "volumes, {} keys, tenant {}\n",
                            name, removed.value("sandboxes", json::array()).size(),
                            removed.value("snapshots", json::array()).size(), bytes,
                            removed.value("volumes", json::array()).size(), removed.value("keys", json::array()).size(),
                            removed.value("egress_records", int64_t{0}), removed.value("audit_records", int64_t{0}),
                            left.value("sandboxes", int64_t{-1}), left.value("snapshots", int64_t{-1}),
                            left.value("volumes", int64_t{-1}), left.value("keys", int64_t{-1}),
                            left.value("tenant", true) ? "still there" : "gone"));
  }
  return exit_code;
}

int KeyCreateCommand(Session& session) {
  const CommandLine& line = session.line;
  json body = {{"scope", line.key_scope}};
  if (!line.key_tenant.empty()) body["tenant"] = line.key_tenant;
  if (!line.key_name.empty()) body["name"] = line.key_name;
  if (line.key_ttl_s > 0) body["ttl_s"] = line.key_ttl_s;
  auto key = session.api.Call(HttpMethod::kPost, "/v1/keys", body);
  if (!key.ok()) return session.Fail(key.error());
  session.Out(line.json ? DumpJson(*key, 2) + "\n" : key->value("key", "") + "\n");
  return 0;
}

int KeyListCommand(Session& session) {
  auto listing = session.api.Call(HttpMethod::kGet, "/v1/keys");
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows = {{"ID", "TENANT", "SCOPE", "NAME", "CREATED", "EXPIRES", "REVOKED"}};
  for (const json& key : listing->value("keys", json::array())) {
    const std::string name = key.value("name", "");
    rows.push_back({key.value("id", ""), key.value("tenant", ""), key.value("scope", ""), name.empty() ? "-" : name,
                    DescribeCreated(key.value("created_at", ""), now), OrDash(key["expires_at"]),
                    OrDash(key["revoked_at"])});
  }
  session.Out(FormatTable(rows));
  return 0;
}

int KeyRevokeCommand(Session& session) { return RemoveEach(session, "/v1/keys/", session.line.key_ids); }

}  // namespace bulkhead::cli
