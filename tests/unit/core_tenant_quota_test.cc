#include "core/tenant_quota.h"

#include <gtest/gtest.h>

namespace bulkhead::core {
namespace {

using nlohmann::json;

TEST(TenantQuota, AFieldOfAPatchSetsItsLimitAndNullRemovesIt) {
  Result<TenantQuota> quota = PatchQuota({}, json{{"sandboxes", 5}, {"cpus", 2.5}, {"snapshot_bytes", 1 << 30}});
  ASSERT_TRUE(quota.ok()) << quota.error().message;
  EXPECT_EQ(QuotaToJson(*quota), (json{{"sandboxes", 5}, {"cpus", 2.5}, {"snapshot_bytes", 1 << 30}}));
  quota = PatchQuota(*quota, json{{"sandboxes", nullptr}, {"memory_mb", 0}});
  ASSERT_TRUE(quota.ok());
  EXPECT_EQ(QuotaToJson(*quota), (json{{"cpus", 2.5}, {"memory_mb", 0}, {"snapshot_bytes", 1 << 30}}));
  EXPECT_TRUE(PatchQuota(*quota, json{{"cpus", nullptr}, {"memory_mb", nullptr}, {"snapshot_bytes", nullptr}})->Empty());
}

TEST(TenantQuota, APatchNamesKnownQuotasWithWholeNonNegativeCounts) {
  for (const json& bad : {json{{"sandbox", 1}}, json{{"sandboxes", -1}}, json{{"sandboxes", 1.5}},
                          json{{"sandboxes", "5"}}, json{{"sandboxes", true}}, json{{"cpus", 1e300}}, json::array(),
                          json("x")}) {
    Result<TenantQuota> quota = PatchQuota({}, bad);
    ASSERT_FALSE(quota.ok()) << bad;
    EXPECT_EQ(quota.error().code, ErrorCode::kInvalid) << bad;
  }
  EXPECT_TRUE(PatchQuota({}, json{{"cpus", 0.25}}).ok());
}

TEST(TenantQuota, ACheckRefusesWhatPassesAQuotaAndNamesIt) {
  TenantQuota quota;
  quota[Resource::kSandboxes] = 2;
  quota[Resource::kCpus] = 1.5;
  Amounts usage, need;
  usage[Resource::kSandboxes] = 1;
  usage[Resource::kCpus] = 0.7;
  need[Resource::kSandboxes] = 1;
  need[Resource::kCpus] = 0.8;  // 0.7 + 0.8 is 1.5: within, whatever the rounding
  EXPECT_TRUE(CheckQuota("acme", quota, usage, need).ok());
  need[Resource::kCpus] = 0.9;
  Status over = CheckQuota("acme", quota, usage, need);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, ErrorCode::kTooMany);
  EXPECT_EQ(over.error().detail_code, "quota_exceeded");
  EXPECT_NE(over.error().message.find("\"cpus\""), std::string::npos) << over.error().message;
  // A usage already past a quota (lowered since) refuses more, not what asks none of it.
  usage[Resource::kSandboxes] = 5;
  need = {};
  need[Resource::kSnapshots] = 1;
  EXPECT_TRUE(CheckQuota("acme", quota, usage, need).ok());
  need[Resource::kSandboxes] = 1;
  EXPECT_NE(CheckQuota("acme", quota, usage, need).error().message.find("\"sandboxes\""), std::string::npos);
}

TEST(TenantQuota, UsageShowsEveryResourceInWholeUnitsButCpus) {
  Amounts usage;
  usage[Resource::kCpus] = 1.5;
  usage[Resource::kMemoryMb] = 1024;
  const json out = AmountsToJson(usage);
  EXPECT_EQ(out.size(), kResources);
  EXPECT_TRUE(out["memory_mb"].is_number_integer());
  EXPECT_EQ(out["cpus"], 1.5);
}

}  // namespace
}  // namespace bulkhead::core
