// Tenants' API keys: what authenticates as whom, revocation and expiry, what survives a reopen
// (and that the secret is not what is stored), and the route-by-route reach of each scope.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "api/access.h"
#include "service/access_keys.h"

namespace bulkhead::api {
namespace {

constexpr char kAdminKey[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string TempDb(const std::string& tag) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("bh-keys-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir + "/s.db";
}

std::string Bearer(const std::string& key) { return "Bearer " + key; }

TEST(AccessKeys, TheHostKeyIsAdminAndATenantsKeyIsItsTenantsWithItsScope) {
  auto keys = AccessKeys::Open(TempDb("who"), kAdminKey);
  ASSERT_TRUE(keys.ok()) << keys.error().message;
  auto admin = (*keys)->Authenticate(Bearer(kAdminKey));
  ASSERT_TRUE(admin && admin->HostAdmin() && admin->tenant.empty());
  ASSERT_TRUE((*keys)->CreateTenant("team-a").ok());
  auto made = (*keys)->CreateKey("team-a", Scope::kUser, "ci", 0);
  ASSERT_TRUE(made.ok()) << made.error().message;
  auto caller = (*keys)->Authenticate(Bearer(made->secret));
  ASSERT_TRUE(caller);
  EXPECT_EQ(caller->tenant, "team-a");
  EXPECT_EQ(caller->scope, Scope::kUser);
  EXPECT_EQ(caller->key_id, made->info.id);
  EXPECT_FALSE(caller->HostAdmin());
  // Wrong secret, wrong id, not bearer, empty.
  std::string wrong = made->secret;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  for (const std::string& header : {Bearer(wrong), Bearer("bhk_" + std::string(16, '0') + "_x"), Bearer("bhk_"),
                                    "Basic " + made->secret, std::string(), Bearer("")})
    EXPECT_FALSE((*keys)->Authenticate(header)) << header;
  EXPECT_FALSE((*keys)->CreateKey("team-a", Scope::kAdmin, "", 0).ok());
  EXPECT_FALSE((*keys)->CreateKey("no-such", Scope::kUser, "", 0).ok());
  EXPECT_FALSE((*keys)->CreateKey("team-a", Scope::kUser, "", -1).ok());
}

TEST(AccessKeys, RevokedExpiredAndRemovedTenantsKeysFail) {
  auto keys = AccessKeys::Open(TempDb("fail"), kAdminKey);
  ASSERT_TRUE(keys.ok());
  ASSERT_TRUE((*keys)->CreateTenant("t1").ok());
  auto revoked = (*keys)->CreateKey("t1", Scope::kReadOnly, "", 0);
  auto expiring = (*keys)->CreateKey("t1", Scope::kUser, "", 1);
  ASSERT_TRUE(revoked.ok() && expiring.ok());
  ASSERT_TRUE((*keys)->Revoke(revoked->info.id).ok());
  EXPECT_FALSE((*keys)->Authenticate(Bearer(revoked->secret)));
  EXPECT_TRUE((*keys)->Authenticate(Bearer(expiring->secret)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE((*keys)->Authenticate(Bearer(expiring->secret)));
  auto kept = (*keys)->CreateKey("t1", Scope::kTenantAdmin, "", 0);
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE((*keys)->RemoveTenant("t1").ok());
  EXPECT_FALSE((*keys)->Authenticate(Bearer(kept->secret)));
  EXPECT_TRUE((*keys)->Keys("t1").empty());
}

TEST(AccessKeys, KeysSurviveAReopenAndOnlyTheSecretsHashIsStored) {
  const std::string db = TempDb("reopen");
  std::string secret, id;
  {
    auto keys = AccessKeys::Open(db, kAdminKey);
    ASSERT_TRUE(keys.ok());
    ASSERT_TRUE((*keys)->CreateTenant("t2").ok());
    auto made = (*keys)->CreateKey("t2", Scope::kTenantAdmin, "ops", 0);
    ASSERT_TRUE(made.ok());
    secret = made->secret;
    id = made->info.id;
  }
  auto keys = AccessKeys::Open(db, kAdminKey);
  ASSERT_TRUE(keys.ok());
  auto caller = (*keys)->Authenticate(Bearer(secret));
  ASSERT_TRUE(caller);
  EXPECT_EQ(caller->scope, Scope::kTenantAdmin);
  ASSERT_EQ((*keys)->Keys("").size(), 1u);
  EXPECT_EQ((*keys)->Keys("")[0].name, "ops");
  const std::string stored_secret = secret.substr(secret.rfind('_') + 1);
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(db).parent_path())) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_EQ(bytes.str().find(stored_secret), std::string::npos) << entry.path();
  }
}

TEST(AccessKeys, TenantNames) {
  for (const char* good : {"a", "team-a", "0x", "abc-123"}) EXPECT_TRUE(ValidTenantName(good)) << good;
  for (const char* bad : {"", "-a", "A", "a_b", "a.b", "a/b", "a b"}) EXPECT_FALSE(ValidTenantName(bad)) << bad;
  EXPECT_FALSE(ValidTenantName(std::string(64, 'a')));
}

TEST(AccessScopes, EachScopeReachesWhatItShould) {
  const Caller admin;
  const Caller tenant_admin{"t", Scope::kTenantAdmin, "k1"};
  const Caller user{"t", Scope::kUser, "k2"};
  const Caller reader{"t", Scope::kReadOnly, "k3"};
  for (RouteId route : {RouteId::kCreateTenant, RouteId::kListVolumes, RouteId::kAudit, RouteId::kMetrics,
                        RouteId::kPullImage, RouteId::kImportSnapshot, RouteId::kExec})
    EXPECT_TRUE(AllowedByScope(admin, route).ok());
  // Host-wide routes: no tenant's key.
  for (RouteId route : {RouteId::kCreateTenant, RouteId::kListTenants, RouteId::kDeleteTenant, RouteId::kAudit,
                        RouteId::kMetrics, RouteId::kCollectImageGarbage, RouteId::kPruneBuildCache,
                        RouteId::kImportSnapshot})
    for (const Caller* caller : {&tenant_admin, &user, &reader})
      EXPECT_EQ(AllowedByScope(*caller, route).error().code, ErrorCode::kForbidden);
  // Reads: every tenant scope.
  for (RouteId route : {RouteId::kGetSandbox, RouteId::kListSandboxes, RouteId::kReadFile, RouteId::kListSnapshots,
                        RouteId::kHealthz, RouteId::kListImages, RouteId::kListVolumes, RouteId::kGetVolume})
    for (const Caller* caller : {&tenant_admin, &user, &reader}) EXPECT_TRUE(AllowedByScope(*caller, route).ok());
  // Changes: not read-only.
  // (A tenant's own images too: pulled, pushed, built, imported and deleted as its own.)
  for (RouteId route : {RouteId::kExec, RouteId::kCreateSandbox, RouteId::kWriteFile, RouteId::kProcessAttach,
                        RouteId::kPortProxy, RouteId::kTcpForward, RouteId::kForkSandbox, RouteId::kCreateVolume,
                        RouteId::kDeleteVolume, RouteId::kPullImage, RouteId::kPushImage, RouteId::kBuildImage,
                        RouteId::kPutImage, RouteId::kDeleteImage}) {
    EXPECT_TRUE(AllowedByScope(user, route).ok());
    EXPECT_FALSE(AllowedByScope(reader, route).ok());
  }
  // Keys: tenant-admin alone.
  for (RouteId route : {RouteId::kCreateKey, RouteId::kListKeys, RouteId::kRevokeKey}) {
    EXPECT_TRUE(AllowedByScope(tenant_admin, route).ok());
    EXPECT_FALSE(AllowedByScope(user, route).ok());
    EXPECT_FALSE(AllowedByScope(reader, route).ok());
  }
}

}  // namespace
}  // namespace bulkhead::api
