// The volumes table: rows survive a reopen, a name is taken once within its tenant, a version 3
// database gains the table, a version 8 one keeps its (the host's) volumes.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "store/state_db.h"

namespace bulkhead {
namespace {

std::string TempDir(const std::string& tag) {
  std::string dir = std::filesystem::temp_directory_path() / ("bh-vol-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(VolumeRows, PersistAcrossReopenAndNamesAreUnique) {
  const std::string dir = TempDir("rows");
  {
    auto db = store::StateDb::Open(dir + "/s.db");
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE((*db)->InsertVolume({"", "cache", 64, "2026-01-01T00:00:00Z"}).ok());
    ASSERT_TRUE((*db)->InsertVolume({"", "data", 2048, "2026-01-02T00:00:00Z"}).ok());
    auto again = (*db)->InsertVolume({"", "cache", 1, "2026-01-03T00:00:00Z"});
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, ErrorCode::kConflict);
    EXPECT_EQ(again.error().detail_code, "volume_exists");
    ASSERT_TRUE((*db)->InsertVolume({"", "gone", 1, "2026-01-04T00:00:00Z"}).ok());
    ASSERT_TRUE((*db)->RemoveVolume("", "gone").ok());
    ASSERT_TRUE((*db)->RemoveVolume("", "never-was").ok());
    // Another tenant's name of the same spelling is its own volume.
    ASSERT_TRUE((*db)->InsertVolume({"team-a", "cache", 8, "2026-01-05T00:00:00Z"}).ok());
    ASSERT_TRUE((*db)->InsertVolume({"team-a", "gone", 8, "2026-01-05T00:00:00Z"}).ok());
    ASSERT_TRUE((*db)->RemoveVolume("team-a", "gone").ok());
  }
  auto db = store::StateDb::Open(dir + "/s.db");
  ASSERT_TRUE(db.ok());
  auto rows = (*db)->LoadVolumes();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ(rows->at(0).tenant, "");
  EXPECT_EQ(rows->at(0).name, "cache");
  EXPECT_EQ(rows->at(0).size_mb, 64);
  EXPECT_EQ(rows->at(0).created_at, "2026-01-01T00:00:00Z");
  EXPECT_EQ(rows->at(1).name, "data");
  EXPECT_EQ(rows->at(1).size_mb, 2048);
  EXPECT_EQ(rows->at(2).tenant, "team-a");
  EXPECT_EQ(rows->at(2).name, "cache");
  EXPECT_EQ(rows->at(2).size_mb, 8);
  std::filesystem::remove_all(dir);
}

TEST(VolumeRows, AVersion8DatabaseKeepsItsVolumesAsTheHosts) {
  const std::string dir = TempDir("v8");
  {
    auto db = store::StateDb::Open(dir + "/s.db");
    ASSERT_TRUE(db.ok());
  }
  {
    // Back to version 8's table: volumes keyed by name alone.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/s.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "DROP TABLE volumes; CREATE TABLE volumes (name TEXT PRIMARY KEY, size_mb INTEGER NOT NULL, "
                           "created_at TEXT NOT NULL); INSERT INTO volumes VALUES ('cache', 64, '2026-01-01T00:00:00Z'); "
                           "PRAGMA user_version = 8;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = store::StateDb::Open(dir + "/s.db");
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto rows = (*db)->LoadVolumes();
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->at(0).tenant, "");
  EXPECT_EQ(rows->at(0).name, "cache");
  EXPECT_EQ(rows->at(0).size_mb, 64);
  EXPECT_TRUE((*db)->InsertVolume({"team-a", "cache", 8, "2026-01-02T00:00:00Z"}).ok());
  EXPECT_FALSE((*db)->InsertVolume({"", "cache", 8, "2026-01-02T00:00:00Z"}).ok());
  std::filesystem::remove_all(dir);
}

TEST(VolumeRows, AVersion3DatabaseGainsTheTableAndKeepsItsSandboxes) {
  const std::string dir = TempDir("v3");
  {
    auto db = store::StateDb::Open(dir + "/s.db");
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Put({"abc", "running", "{}", "2026-01-01T00:00:00Z", 0, 1, 2, 3}).ok());
  }
  {
    // Back to what version 3 had: no volumes table.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/s.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "DROP TABLE volumes; PRAGMA user_version = 3;", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = store::StateDb::Open(dir + "/s.db");
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto volumes = (*db)->LoadVolumes();
  ASSERT_TRUE(volumes.ok()) << volumes.error().message;
  EXPECT_TRUE(volumes->empty());
  EXPECT_TRUE((*db)->InsertVolume({"", "cache", 64, "2026-01-01T00:00:00Z"}).ok());
  auto sandboxes = (*db)->LoadAll();
  ASSERT_TRUE(sandboxes.ok());
  ASSERT_EQ(sandboxes->size(), 1u);
  EXPECT_EQ(sandboxes->at(0).id, "abc");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bulkhead
