// Unit tests for the pieces of core/ and store/ that hold a sandbox's durable state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sqlite3.h>

#include <filesystem>

#include "core/spec_json.h"
#include "runtime/seccomp.h"
#include "store/state_db.h"

namespace bulkhead {
namespace {

TEST(SpecJson, RoundTripsEveryField) {
  core::SandboxSpec s;
  s.image = "alpine";
  s.cpus = 0.5;
  s.memory_mb = 256;
  s.disk_mb = 100;
  s.pids = 64;
  s.timeout_s = 0;
  s.env = {{"A", "1"}, {"B", "x=y"}};
  s.workdir = "/src";
  s.user = "1000:1000";
  s.network.allow = {"example.com"};
  s.metadata = {{"task", "t1"}};
  auto back = core::SpecFromJson(core::SpecToJson(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->image, "alpine");
  EXPECT_DOUBLE_EQ(back->cpus, 0.5);
  EXPECT_EQ(back->memory_mb, 256);
  EXPECT_EQ(back->pids, 64);
  EXPECT_EQ(back->env.at("B"), "x=y");
  EXPECT_EQ(back->user, "1000:1000");
  EXPECT_EQ(back->network.allow.at(0), "example.com");
  EXPECT_EQ(back->metadata.at("task"), "t1");
}

TEST(SpecJson, VolumesRoundTripAndOldRowsHaveNone) {
  core::SandboxSpec s;
  s.volumes = {{"cache", "/cache", false}, {"data", "/srv/data", true}};
  auto back = core::SpecFromJson(core::SpecToJson(s));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->volumes.size(), 2u);
  EXPECT_EQ(back->volumes[1].name, "data");
  EXPECT_EQ(back->volumes[1].path, "/srv/data");
  EXPECT_TRUE(back->volumes[1].read_only);
  // A spec stored before volumes existed.
  auto old = core::SpecFromJson(
      R"({"image":"host","runtime":"native","cpus":1,"memory_mb":1,"disk_mb":1,"pids":1,"timeout_s":0,)"
      R"("idle_timeout_s":0,"on_timeout":"kill","env":{},"workdir":"/w","user":"root",)"
      R"("network":{"mode":"none","allow":[]},"metadata":{}})");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_TRUE(old->volumes.empty());
  EXPECT_TRUE(old->sudo_users.empty());  // nor sudo users
}

TEST(SpecJson, SudoUsersRoundTrip) {
  core::SandboxSpec s;
  s.sudo_users = {"user", "1001"};
  auto back = core::SpecFromJson(core::SpecToJson(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->sudo_users, s.sudo_users);
}

TEST(SpecJson, PreviewAccessRoundTripsAndOldRowsArePublic) {
  core::SandboxSpec s;
  s.preview = {.is_public = false, .token = "0123abcd"};
  auto back = core::SpecFromJson(core::SpecToJson(s));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->preview.is_public);
  EXPECT_EQ(back->preview.token, "0123abcd");
  // A spec stored before private previews existed.
  auto old = core::SpecFromJson(
      R"({"image":"host","runtime":"native","cpus":1,"memory_mb":1,"disk_mb":1,"pids":1,"timeout_s":0,)"
      R"("idle_timeout_s":0,"on_timeout":"kill","env":{},"workdir":"/w","user":"root",)"
      R"("network":{"mode":"none","allow":[]},"metadata":{}})");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_TRUE(old->preview.is_public);
  EXPECT_EQ(old->preview.token, "");
}

TEST(SpecJson, E2bAutoResumeRoundTripsAndOldRowsAreWithout) {
  core::SandboxSpec s;
  s.e2b_auto_resume = true;
  auto back = core::SpecFromJson(core::SpecToJson(s));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->e2b_auto_resume);
  auto without = core::SpecFromJson(core::SpecToJson(core::SandboxSpec{}));
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->e2b_auto_resume);
}

TEST(SpecJson, RejectsCorruptRows) {
  EXPECT_FALSE(core::SpecFromJson("{").ok());
  EXPECT_FALSE(core::SpecFromJson("{\"image\": 3}").ok());
  // A number that is no int64 (found by fuzzing: the conversion was undefined behaviour).
  const std::string huge =
      R"({"image":"host","runtime":"native","cpus":1,"memory_mb":1.0249e22,"disk_mb":1,"pids":1,"timeout_s":0,)"
      R"("idle_timeout_s":0,"on_timeout":"kill","env":{},"workdir":"/w","user":"root",)"
      R"("network":{"mode":"none","allow":[]},"metadata":{}})";
  EXPECT_FALSE(core::SpecFromJson(huge).ok());
}

TEST(StateDb, PersistsRowsAcrossReopen) {
  std::string dir = std::filesystem::temp_directory_path() / ("bh-db-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto db = store::StateDb::Open(dir + "/s.db");
    ASSERT_TRUE(db.ok()) << db.error().message;
    store::SandboxRow r{"abc", "running", "{}", "2026-01-01T00:00:00Z", 42, 0x10000000, 1234, 99};
    ASSERT_TRUE((*db)->Put(r).ok());
    r.id = "def";
    ASSERT_TRUE((*db)->Put(r).ok());
    ASSERT_TRUE((*db)->Remove("def").ok());
  }
  auto db = store::StateDb::Open(dir + "/s.db");
  ASSERT_TRUE(db.ok());
  auto rows = (*db)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->at(0).id, "abc");
  EXPECT_EQ(rows->at(0).uid_base, 0x10000000u);
  EXPECT_EQ(rows->at(0).init_start_time, 99u);
  std::filesystem::remove_all(dir);
}

TEST(StateDb, MigratesVersion1ExpiryFromSecondsToMilliseconds) {
  std::string dir = std::filesystem::temp_directory_path() / ("bh-db-v1-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/s.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "CREATE TABLE sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL, spec_json TEXT NOT NULL,"
                           " created_at TEXT NOT NULL, expires_at INTEGER NOT NULL DEFAULT 0, uid_base INTEGER NOT NULL,"
                           " init_pid INTEGER NOT NULL, init_start_time INTEGER NOT NULL);"
                           "INSERT INTO sandboxes VALUES ('old', 'running', '{}', 'x', 1700000000, 1, 2, 3);"
                           "PRAGMA user_version = 1;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = store::StateDb::Open(dir + "/s.db");
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto rows = (*db)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->at(0).expires_at_ms, 1700000000000);
  EXPECT_EQ(rows->at(0).init_start_time, 3u);
  std::filesystem::remove_all(dir);
}

TEST(Seccomp, FilterCompilesToBpf) {
  auto prog = runtime::BuildSeccompFilter();
  ASSERT_TRUE(prog.ok()) << prog.error().message;
  // An architecture check, then dozens of rules: a few hundred instructions at most.
  EXPECT_GT(prog->size(), 50u);
  EXPECT_LT(prog->size(), 4096u);
}

}  // namespace
}  // namespace bulkhead
