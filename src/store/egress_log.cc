// The egress log table of the state database: one row per connection or DNS lookup a
// sandbox's egress proxy decided, trimmed to the newest kEgressKept rows per sandbox.
#include "store/state_db.h"

namespace bulkhead::store {

Result<int64_t> StateDb::InsertEgress(const EgressRow& r) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "INSERT INTO egress (sandbox_id, time_ms, protocol, name, address, port, query_type, allowed, reason, "
      "bytes_out, bytes_in, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare egress");
  sqlite3_bind_text(st.s, 1, r.sandbox_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, r.time_ms);
  sqlite3_bind_text(st.s, 3, r.protocol.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 4, r.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 5, r.address.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 6, r.port);
  sqlite3_bind_text(st.s, 7, r.query_type.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st.s, 8, r.allowed ? 1 : 0);
  sqlite3_bind_text(st.s, 9, r.reason.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 10, r.bytes_out);
  sqlite3_bind_int64(st.s, 11, r.bytes_in);
  sqlite3_bind_int64(st.s, 12, r.duration_ms);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "insert egress");
  int64_t id = sqlite3_last_insert_rowid(db_);
  // Trim now and then rather than on every insert: the log may run past the cap by a little.
  if (id % 128 == 0) {
    Stmt trim;
    const char* del =
        "DELETE FROM egress WHERE sandbox_id = ?1 AND id <= (SELECT id FROM egress WHERE sandbox_id = ?1 "
        "ORDER BY id DESC LIMIT 1 OFFSET ?2)";
    if (sqlite3_prepare_v2(db_, del, -1, &trim.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare trim");
    sqlite3_bind_text(trim.s, 1, r.sandbox_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(trim.s, 2, kEgressKept);
    if (sqlite3_step(trim.s) != SQLITE_DONE) return DbError(db_, "trim egress");
  }
  return id;
}

Status StateDb::FinishEgress(int64_t id, int64_t bytes_out, int64_t bytes_in, int64_t duration_ms,
                             const std::string& reason) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql = "UPDATE egress SET bytes_out = ?, bytes_in = ?, duration_ms = ?, reason = ? WHERE id = ?";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare egress finish");
  sqlite3_bind_int64(st.s, 1, bytes_out);
  sqlite3_bind_int64(st.s, 2, bytes_in);
  sqlite3_bind_int64(st.s, 3, duration_ms);
  sqlite3_bind_text(st.s, 4, reason.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 5, id);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "finish egress");
  return {};
}

Result<std::vector<EgressRow>> StateDb::LoadEgress(const std::string& sandbox_id, int64_t limit) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "SELECT * FROM (SELECT id, sandbox_id, time_ms, protocol, name, address, port, query_type, allowed, reason, "
      "bytes_out, bytes_in, duration_ms FROM egress WHERE sandbox_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare egress load");
  sqlite3_bind_text(st.s, 1, sandbox_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, limit);
  std::vector<EgressRow> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    auto text = [&](int i) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, i))); };
    EgressRow r;
    r.id = sqlite3_column_int64(st.s, 0);
    r.sandbox_id = text(1);
    r.time_ms = sqlite3_column_int64(st.s, 2);
    r.protocol = text(3);
    r.name = text(4);
    r.address = text(5);
    r.port = sqlite3_column_int64(st.s, 6);
    r.query_type = text(7);
    r.allowed = sqlite3_column_int(st.s, 8) != 0;
    r.reason = text(9);
    r.bytes_out = sqlite3_column_int64(st.s, 10);
    r.bytes_in = sqlite3_column_int64(st.s, 11);
    r.duration_ms = sqlite3_column_int64(st.s, 12);
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return DbError(db_, "load egress");
  return rows;
}

Status StateDb::RemoveEgress(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM egress WHERE sandbox_id = ?", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare egress remove");
  sqlite3_bind_text(st.s, 1, sandbox_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "remove egress");
  return {};
}

Result<int64_t> StateDb::PruneEgress(int64_t before_ms) {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM egress WHERE time_ms < ?", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare egress prune");
  sqlite3_bind_int64(st.s, 1, before_ms);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "prune egress");
  return static_cast<int64_t>(sqlite3_changes(db_));
}

}  // namespace bulkhead::store
