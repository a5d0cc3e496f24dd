// The snapshots table of the state database and the version 3 -> 4 migration that adds it.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/spec_json.h"
#include "store/state_db.h"

namespace bulkhead::store {
namespace {

class StoreSnapshotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("bh-db-snap-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string DbPath() const { return dir_ + "/s.db"; }
  // A database as an older version left it: the sandboxes table as versions 2 to 5 made it,
  // then `rest` (SQL).
  void MakeOldDatabase(const std::string& rest) {
    const std::string sql =
        "CREATE TABLE sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL, spec_json TEXT NOT NULL, created_at TEXT "
        "NOT NULL, expires_at_ms INTEGER NOT NULL DEFAULT 0, uid_base INTEGER NOT NULL, init_pid INTEGER NOT NULL, "
        "init_start_time INTEGER NOT NULL);" + rest;
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(DbPath().c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
  std::string dir_;
};

SnapshotRow Row(const std::string& id, const std::string& state) {
  core::SandboxSpec spec;
  spec.metadata = {{"task", "t1"}};
  return SnapshotRow{id, "before", "sb1", "2026-01-01T00:00:0" + id.substr(id.size() - 1) + "Z", 4096, "host",
                     core::SpecToJson(spec), 0x10010000, state};
}

TEST_F(StoreSnapshotsTest, RowsPersistAndUpdateInPlace) {
  {
    auto db = StateDb::Open(DbPath());
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE((*db)->PutSnapshot(Row("snap_2", "creating")).ok());
    ASSERT_TRUE((*db)->PutSnapshot(Row("snap_1", "ready")).ok());
    SnapshotRow done = Row("snap_2", "ready");
    done.size_bytes = 8192;
    ASSERT_TRUE((*db)->PutSnapshot(done).ok());
    ASSERT_TRUE((*db)->PutSnapshot(Row("snap_3", "creating")).ok());
    ASSERT_TRUE((*db)->RemoveSnapshot("snap_3").ok());
  }
  auto db = StateDb::Open(DbPath());
  ASSERT_TRUE(db.ok());
  auto rows = (*db)->LoadSnapshots();
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(rows->at(0).id, "snap_1");  // oldest first
  EXPECT_EQ(rows->at(1).id, "snap_2");
  EXPECT_EQ(rows->at(1).state, "ready");
  EXPECT_EQ(rows->at(1).size_bytes, 8192);
  EXPECT_EQ(rows->at(1).uid_base, 0x10010000u);
  EXPECT_EQ(rows->at(1).name, "before");
  auto spec = core::SpecFromJson(rows->at(1).spec_json);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->metadata.at("task"), "t1");
}

TEST_F(StoreSnapshotsTest, Version3DatabaseGainsTheSnapshotsTableAndKeepsItsSandboxes) {
  MakeOldDatabase("INSERT INTO sandboxes VALUES ('old', 'running', '{}', 'x', 5, 1, 2, 3);"
                  "PRAGMA user_version = 3;");
  auto db = StateDb::Open(DbPath());
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto sandboxes = (*db)->LoadAll();
  ASSERT_TRUE(sandboxes.ok());
  ASSERT_EQ(sandboxes->size(), 1u);
  EXPECT_EQ(sandboxes->at(0).id, "old");
  EXPECT_EQ(sandboxes->at(0).expires_at_ms, 5);
  auto none = (*db)->LoadSnapshots();
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE((*db)->PutSnapshot(Row("snap_1", "ready")).ok());
  EXPECT_EQ((*db)->LoadSnapshots()->size(), 1u);
}

TEST_F(StoreSnapshotsTest, Version5DatabaseGainsMemoryAndOnDiskAndKeepsItsRows) {
  MakeOldDatabase("INSERT INTO sandboxes VALUES ('old', 'paused', '{}', 'x', 0, 1, 2, 3);"
                  "CREATE TABLE snapshots (id TEXT PRIMARY KEY, name TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
                  " created_at TEXT NOT NULL, size_bytes INTEGER NOT NULL DEFAULT 0, image TEXT NOT NULL,"
                  " spec_json TEXT NOT NULL, uid_base INTEGER NOT NULL, state TEXT NOT NULL);"
                  "INSERT INTO snapshots VALUES ('snap_old', '', 'old', 'x', 1, 'host', '{}', 0, 'ready');"
                  "PRAGMA user_version = 5;");
  for (int open = 0; open < 2; ++open) {  // and a second open finds the columns there
    auto db = StateDb::Open(DbPath());
    ASSERT_TRUE(db.ok()) << db.error().message;
    auto sandboxes = (*db)->LoadAll();
    ASSERT_TRUE(sandboxes.ok());
    ASSERT_EQ(sandboxes->size(), 1u);
    EXPECT_FALSE(sandboxes->at(0).on_disk) << "paused in memory, as every sandbox before version 6";
    auto snapshots = (*db)->LoadSnapshots();
    ASSERT_TRUE(snapshots.ok());
    ASSERT_EQ(snapshots->size(), 1u);
    EXPECT_EQ(snapshots->at(0).memory, "") << "files only, as every snapshot before version 6";
  }
  auto db = StateDb::Open(DbPath());
  ASSERT_TRUE(db.ok());
  SandboxRow paused = (*db)->LoadAll()->at(0);
  paused.on_disk = true;
  ASSERT_TRUE((*db)->Put(paused).ok());
  EXPECT_TRUE((*db)->LoadAll()->at(0).on_disk);
  SnapshotRow with_memory = Row("snap_2", "ready");
  with_memory.memory = "gvisor runsc version 1";
  ASSERT_TRUE((*db)->PutSnapshot(with_memory).ok());
  auto rows = (*db)->LoadSnapshots();
  ASSERT_TRUE(rows.ok());
  for (const SnapshotRow& row : *rows)
    EXPECT_EQ(row.memory, row.id == "snap_2" ? "gvisor runsc version 1" : "") << row.id;
}

TEST(SpecJsonSnapshot, FromSnapshotRoundTripsAndOldRowsHaveNone) {
  core::SandboxSpec plain;
  auto old = core::SpecFromJson(core::SpecToJson(plain));
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->from_snapshot.has_value());
  nlohmann::json text = nlohmann::json::parse(core::SpecToJson(plain));
  EXPECT_FALSE(text.contains("from_snapshot"));
  text["from_snapshot"] = "snap_abc";
  auto with = core::SpecFromJson(text.dump());
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->from_snapshot, "snap_abc");
  auto again = core::SpecFromJson(core::SpecToJson(*with));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->from_snapshot, "snap_abc");
}

}  // namespace
}  // namespace bulkhead::store
