// The volumes table of the state database: one row per named volume.
#include "store/state_db.h"

namespace bulkhead::store {

Status StateDb::InsertVolume(const VolumeRow& r) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql = "INSERT INTO volumes (tenant, name, size_mb, created_at) VALUES (?, ?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare volume insert");
  sqlite3_bind_text(st.s, 1, r.tenant.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, r.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 3, r.size_mb);
  sqlite3_bind_text(st.s, 4, r.created_at.c_str(), -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_CONSTRAINT)
    return MakeError(ErrorCode::kConflict, "a volume named " + r.name + " exists", "volume_exists");
  if (rc != SQLITE_DONE) return DbError(db_, "insert volume");
  return {};
}

Status StateDb::RemoveVolume(const std::string& tenant, const std::string& name) {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM volumes WHERE tenant = ? AND name = ?", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare volume remove");
  sqlite3_bind_text(st.s, 1, tenant.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, name.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "remove volume");
  return {};
}

Result<std::vector<VolumeRow>> StateDb::LoadVolumes() {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql = "SELECT tenant, name, size_mb, created_at FROM volumes ORDER BY tenant, name";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare volume load");
  std::vector<VolumeRow> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    VolumeRow r;
    r.tenant = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0));
    r.name = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1));
    r.size_mb = sqlite3_column_int64(st.s, 2);
    r.created_at = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 3));
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return DbError(db_, "load volumes");
  return rows;
}

}  // namespace bulkhead::store
