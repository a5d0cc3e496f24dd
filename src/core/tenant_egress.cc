#include "core/tenant_egress.h"

#include <algorithm>

namespace bulkhead::core {
namespace {

using nlohmann::json;

Error Invalid(const std::string& what) { return MakeError(ErrorCode::kInvalid, what); }

Result<std::vector<std::string>> Strings(const json& object, const char* key, const std::string& where) {
  std::vector<std::string> out;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return out;
  if (!it->is_array()) return Invalid(where + key + " must be an array of strings");
  for (const json& entry : *it) {
    if (!entry.is_string()) return Invalid(where + key + " must be an array of strings");
    out.push_back(entry.get<std::string>());
  }
  return out;
}

}  // namespace

json TenantEgressToJson(const TenantEgress& egress) {
  json out = json::object();
  if (egress.default_policy)
    out["default"] = {{"mode", egress.default_policy->mode},
                      {"allow", egress.default_policy->allow},
                      {"deny", egress.default_policy->deny}};
  if (!egress.deny.empty()) out["deny"] = egress.deny;
  return out;
}

Result<TenantEgress> TenantEgressFromJson(const json& value) {
  if (!value.is_object()) return Invalid("egress must be an object");
  for (const auto& [key, unused] : value.items())
    if (key != "default" && key != "deny") return Invalid("egress." + key + " is not a known field");
  TenantEgress egress;
  auto deny = Strings(value, "deny", "egress.");
  if (!deny) return deny.error();
  egress.deny = std::move(*deny);
  if (auto policy = value.find("default"); policy != value.end() && !policy->is_null()) {
    if (!policy->is_object()) return Invalid("egress.default must be an object");
    NetworkPolicy out;
    if (auto mode = policy->find("mode"); mode != policy->end()) {
      if (!mode->is_string()) return Invalid("egress.default.mode must be a string");
      out.mode = mode->get<std::string>();
    }
    auto allow = Strings(*policy, "allow", "egress.default.");
    if (!allow) return allow.error();
    auto own_deny = Strings(*policy, "deny", "egress.default.");
    if (!own_deny) return own_deny.error();
    out.allow = std::move(*allow);
    out.deny = std::move(*own_deny);
    egress.default_policy = std::move(out);
  }
  return egress;
}

NetworkPolicy WithTenantDeny(NetworkPolicy policy, const TenantEgress& egress) {
  if (policy.mode == "none") return policy;
  for (const std::string& entry : egress.deny)
    if (std::find(policy.deny.begin(), policy.deny.end(), entry) == policy.deny.end()) policy.deny.push_back(entry);
  return policy;
}

}  // namespace bulkhead::core
