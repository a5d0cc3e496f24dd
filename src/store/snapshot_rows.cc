// The snapshots table of the state database (schema version 4; memory since 6).
#include "store/state_db.h"

namespace bulkhead::store {

Status StateDb::PutSnapshot(const SnapshotRow& r) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "INSERT OR REPLACE INTO snapshots (id, name, sandbox_id, created_at, size_bytes, image, spec_json, uid_base, "
      "state, memory) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare put snapshot");
  sqlite3_bind_text(st.s, 1, r.id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, r.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, r.sandbox_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 4, r.created_at.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 5, r.size_bytes);
  sqlite3_bind_text(st.s, 6, r.image.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 7, r.spec_json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 8, r.uid_base);
  sqlite3_bind_text(st.s, 9, r.state.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 10, r.memory.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "put snapshot");
  return {};
}

Status StateDb::RemoveSnapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM snapshots WHERE id = ?", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare remove snapshot");
  sqlite3_bind_text(st.s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "remove snapshot");
  return {};
}

Result<std::vector<SnapshotRow>> StateDb::LoadSnapshots() {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "SELECT id, name, sandbox_id, created_at, size_bytes, image, spec_json, uid_base, state, memory FROM snapshots "
      "ORDER BY created_at, id";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare load snapshots");
  std::vector<SnapshotRow> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    auto text = [&](int i) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, i))); };
    SnapshotRow r;
    r.id = text(0);
    r.name = text(1);
    r.sandbox_id = text(2);
    r.created_at = text(3);
    r.size_bytes = sqlite3_column_int64(st.s, 4);
    r.image = text(5);
    r.spec_json = text(6);
    r.uid_base = static_cast<uint32_t>(sqlite3_column_int64(st.s, 7));
    r.state = text(8);
    r.memory = text(9);
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return DbError(db_, "load snapshots");
  return rows;
}

}  // namespace bulkhead::store
