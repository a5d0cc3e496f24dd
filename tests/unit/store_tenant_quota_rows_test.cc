// The tenant_quotas table: a quota is kept across a reopen, replaced whole, removed by an empty
// one and with its tenant; a version 7 database gains the table.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "store/state_db.h"

namespace bulkhead {
namespace {

std::string TempDir(const std::string& tag) {
  std::string dir = std::filesystem::temp_directory_path() / ("bh-quota-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

using Rows = std::vector<std::pair<std::string, std::string>>;

TEST(TenantQuotaRows, KeptReplacedAndRemovedWithTheirTenant) {
  const std::string dir = TempDir("rows");
  {
    auto db = store::StateDb::Open(dir + "/s.db");
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE((*db)->InsertTenant({"acme", "2026-01-01T00:00:00Z"}).ok());
    ASSERT_TRUE((*db)->InsertTenant({"beta", "2026-01-01T00:00:00Z"}).ok());
    ASSERT_TRUE((*db)->PutTenantQuota("acme", R"({"sandboxes":5})").ok());
    ASSERT_TRUE((*db)->PutTenantQuota("acme", R"({"cpus":2.5})").ok());
    ASSERT_TRUE((*db)->PutTenantQuota("beta", R"({"memory_mb":1024})").ok());
  }
  auto db = store::StateDb::Open(dir + "/s.db");
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*(*db)->LoadTenantQuotas(), (Rows{{"acme", R"({"cpus":2.5})"}, {"beta", R"({"memory_mb":1024})"}}));
  ASSERT_TRUE((*db)->PutTenantQuota("acme", "{}").ok());
  ASSERT_TRUE((*db)->RemoveTenant("beta").ok());
  EXPECT_EQ(*(*db)->LoadTenantQuotas(), Rows{});
  std::filesystem::remove_all(dir);
}

TEST(TenantQuotaRows, AVersion7DatabaseGainsTheTable) {
  const std::string dir = TempDir("v7");
  const std::string path = dir + "/s.db";
  {
    auto db = store::StateDb::Open(path);
    ASSERT_TRUE(db.ok());
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "DROP TABLE tenant_quotas; PRAGMA user_version = 7;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  auto db = store::StateDb::Open(path);
  ASSERT_TRUE(db.ok()) << db.error().message;
  ASSERT_TRUE((*db)->PutTenantQuota("acme", R"({"snapshots":3})").ok());
  EXPECT_EQ((*db)->LoadTenantQuotas()->size(), 1u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bulkhead
