// A tenant's egress rules, set by the host's admin (PATCH /v1/tenants/{t} {"egress"}): the
// network policy its sandboxes get when a create names none, and deny entries that every one
// of its sandboxes carries whatever policy its keys give it (deny is checked before allow, so
// no allow entry re-opens them). The manager adds the deny entries on every create and network
// change of a tenant's sandbox. Plain logic (tests/unit/core_tenant_egress_test.cc).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/types.h"

namespace bulkhead::core {

struct TenantEgress {
  std::optional<NetworkPolicy> default_policy;
  std::vector<std::string> deny;
  bool Empty() const { return !default_policy && deny.empty(); }
};

// {"default": {"mode", "allow", "deny"} or null, "deny": [...]}; {} when empty.
nlohmann::json TenantEgressToJson(const TenantEgress& egress);
// Its shape alone (the API checks each entry before it stores one): 422 for another.
Result<TenantEgress> TenantEgressFromJson(const nlohmann::json& value);

// `policy` with the tenant's deny entries it lacks added, unless its mode is none (which
// reaches nothing anyway).
NetworkPolicy WithTenantDeny(NetworkPolicy policy, const TenantEgress& egress);

}  // namespace bulkhead::core
