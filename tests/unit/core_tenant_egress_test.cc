// A tenant's egress rules: their JSON both ways, and the deny entries a sandbox's policy gains.
#include <gtest/gtest.h>

#include "core/tenant_egress.h"

namespace bulkhead::core {
namespace {

using nlohmann::json;

TEST(TenantEgress, JsonRoundTripsAndEmptyIsAnEmptyObject) {
  EXPECT_EQ(TenantEgressToJson({}), json::object());
  const json text = {{"default", {{"mode", "allowlist"}, {"allow", {"example.com"}}, {"deny", json::array()}}},
                     {"deny", {"10.0.0.0/8", "internal.test"}}};
  auto egress = TenantEgressFromJson(text);
  ASSERT_TRUE(egress.ok()) << egress.error().message;
  ASSERT_TRUE(egress->default_policy);
  EXPECT_EQ(egress->default_policy->mode, "allowlist");
  EXPECT_EQ(egress->default_policy->allow, std::vector<std::string>{"example.com"});
  EXPECT_EQ(egress->deny, (std::vector<std::string>{"10.0.0.0/8", "internal.test"}));
  EXPECT_EQ(TenantEgressToJson(*egress), text);
  auto deny_only = TenantEgressFromJson({{"deny", {"internal.test"}}, {"default", nullptr}});
  ASSERT_TRUE(deny_only.ok());
  EXPECT_FALSE(deny_only->default_policy);
  EXPECT_FALSE(deny_only->Empty());
}

TEST(TenantEgress, BadShapesAreRefused) {
  for (const json& bad : {json("x"), json{{"deny", "a"}}, json{{"deny", {1}}}, json{{"default", 3}},
                          json{{"default", {{"mode", 1}}}}, json{{"default", {{"allow", {true}}}}},
                          json{{"allow", json::array()}}}) {
    auto parsed = TenantEgressFromJson(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalid) << bad;
  }
}

TEST(TenantEgress, DenyEntriesAreAddedOnceAndNotToModeNone) {
  TenantEgress egress;
  egress.deny = {"internal.test", "10.0.0.0/8"};
  NetworkPolicy open{.mode = "open", .allow = {}, .deny = {"10.0.0.0/8"}};
  EXPECT_EQ(WithTenantDeny(open, egress).deny, (std::vector<std::string>{"10.0.0.0/8", "internal.test"}));
  NetworkPolicy allowlist{.mode = "allowlist", .allow = {"internal.test"}, .deny = {}};
  const NetworkPolicy guarded = WithTenantDeny(allowlist, egress);
  EXPECT_EQ(guarded.allow, std::vector<std::string>{"internal.test"});  // still listed, but denied first
  EXPECT_EQ(guarded.deny, (std::vector<std::string>{"internal.test", "10.0.0.0/8"}));
  EXPECT_TRUE(WithTenantDeny(NetworkPolicy{}, egress).deny.empty());
  EXPECT_EQ(WithTenantDeny(open, TenantEgress{}).deny, open.deny);
}

}  // namespace
}  // namespace bulkhead::core
