#include "store/state_db.h"

namespace bulkhead::store {
namespace {

// The schema, at version kSchemaVersion. A change gets a new version and a step in Migrate.
constexpr int kSchemaVersion = 10;  // 3: egress log, 4: snapshots, 5: volumes, 6: memory snapshots, pause to disk, 7: tenants, keys, 8: quotas, 9: tenants' volumes, 10: tenants' egress
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at_ms INTEGER NOT NULL DEFAULT 0,
  uid_base INTEGER NOT NULL,
  init_pid INTEGER NOT NULL,
  init_start_time INTEGER NOT NULL,
  on_disk INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS egress (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sandbox_id TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  protocol TEXT NOT NULL,
  name TEXT NOT NULL,
  address TEXT NOT NULL,
  port INTEGER NOT NULL,
  query_type TEXT NOT NULL,
  allowed INTEGER NOT NULL,
  reason TEXT NOT NULL,
  bytes_out INTEGER NOT NULL DEFAULT 0,
  bytes_in INTEGER NOT NULL DEFAULT 0,
  duration_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS egress_by_sandbox ON egress (sandbox_id, id);
CREATE TABLE IF NOT EXISTS snapshots (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  created_at TEXT NOT NULL,
  size_bytes INTEGER NOT NULL DEFAULT 0,
  image TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  uid_base INTEGER NOT NULL,
  state TEXT NOT NULL,
  memory TEXT NOT NULL DEFAULT ''
);
)sql";

// Version 5: named volumes; 9: each tenant's own (tenant '' is the host's).
constexpr const char* kVolumesSchema = R"sql(
CREATE TABLE IF NOT EXISTS volumes (
  tenant TEXT NOT NULL DEFAULT '',
  name TEXT NOT NULL,
  size_mb INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (tenant, name)
);
)sql";

// Version 7: tenants and their API keys (access_rows.cc).
constexpr const char* kAccessSchema = R"sql(
CREATE TABLE IF NOT EXISTS tenants (
  name TEXT PRIMARY KEY,
  created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  scope TEXT NOT NULL,
  name TEXT NOT NULL,
  secret_sha256 TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at_ms INTEGER NOT NULL DEFAULT 0,
  revoked_at_ms INTEGER NOT NULL DEFAULT 0
);
)sql";

// Version 8: tenants' quotas (core/tenant_quota.h), as the API's JSON object.
constexpr const char* kQuotaSchema = R"sql(
CREATE TABLE IF NOT EXISTS tenant_quotas (
  tenant TEXT PRIMARY KEY,
  quota_json TEXT NOT NULL
);
)sql";

// Version 10: tenants' egress rules (core/tenant_egress.h), as the API's JSON object.
constexpr const char* kEgressRulesSchema = R"sql(
CREATE TABLE IF NOT EXISTS tenant_egress (
  tenant TEXT PRIMARY KEY,
  egress_json TEXT NOT NULL
);
)sql";

}  // namespace

Error DbError(sqlite3* db, const std::string& what) {
  return MakeError(ErrorCode::kInternal, what + ": " + sqlite3_errmsg(db));
}

Result<std::unique_ptr<StateDb>> StateDb::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  std::unique_ptr<StateDb> out(new StateDb(db));
  if (rc != SQLITE_OK) return DbError(db, "open " + path);
  sqlite3_busy_timeout(db, 5000);
  BH_TRY(out->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"));
  BH_TRY(out->Migrate());
  return out;
}

StateDb::~StateDb() { sqlite3_close(db_); }

Status StateDb::Migrate() {
  int version = 0;
  {
    Stmt st;
    if (sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "version");
    if (sqlite3_step(st.s) == SQLITE_ROW) version = sqlite3_column_int(st.s, 0);
  }
  if (version > kSchemaVersion)
    return MakeError(ErrorCode::kInternal, "the state database is from a newer bulkhead (schema " +
                                               std::to_string(version) + ")");
  BH_TRY(Exec("BEGIN IMMEDIATE"));
  Status st;
  if (version == 1) {
    // Version 1 kept expiry in whole seconds, which cut lifetimes short by up to a second.
    st = Exec("ALTER TABLE sandboxes RENAME COLUMN expires_at TO expires_at_ms; "
              "UPDATE sandboxes SET expires_at_ms = expires_at_ms * 1000;");
  }
  // Version 6 records a memory snapshot's image format (the snapshots before it are files
  // only) and a sandbox paused to disk (none was before).
  if (st.ok() && version >= 4 && !HasColumn("snapshots", "memory"))
    st = Exec("ALTER TABLE snapshots ADD COLUMN memory TEXT NOT NULL DEFAULT ''");
  if (st.ok() && version >= 1 && !HasColumn("sandboxes", "on_disk"))
    st = Exec("ALTER TABLE sandboxes ADD COLUMN on_disk INTEGER NOT NULL DEFAULT 0");
  // Version 9 keys a volume by its tenant and name: the host's volumes of before keep theirs.
  if (st.ok() && HasColumn("volumes", "name") && !HasColumn("volumes", "tenant"))
    st = Exec("ALTER TABLE volumes RENAME TO volumes_v5");
  if (st.ok()) st = Exec(kSchema);
  if (st.ok()) st = Exec(kVolumesSchema);
  if (st.ok() && HasColumn("volumes_v5", "name"))
    st = Exec("INSERT INTO volumes (tenant, name, size_mb, created_at) "
              "SELECT '', name, size_mb, created_at FROM volumes_v5; DROP TABLE volumes_v5;");
  if (st.ok()) st = Exec(kAccessSchema);
  if (st.ok()) st = Exec(kQuotaSchema);
  if (st.ok()) st = Exec(kEgressRulesSchema);
  if (st.ok()) st = Exec(("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str());
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

bool StateDb::HasColumn(const std::string& table, const std::string& column) {
  Stmt st;
  const std::string sql = "SELECT 1 FROM pragma_table_info('" + table + "') WHERE name = ?";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return false;
  sqlite3_bind_text(st.s, 1, column.c_str(), -1, SQLITE_TRANSIENT);
  return sqlite3_step(st.s) == SQLITE_ROW;
}

Status StateDb::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    return MakeError(ErrorCode::kInternal, std::string("sqlite: ") + msg);
  }
  return {};
}

Status StateDb::Put(const SandboxRow& r) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "INSERT OR REPLACE INTO sandboxes (id, state, spec_json, created_at, expires_at_ms, uid_base, init_pid, "
      "init_start_time, on_disk) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare put");
  sqlite3_bind_text(st.s, 1, r.id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, r.state.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, r.spec_json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 4, r.created_at.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 5, r.expires_at_ms);
  sqlite3_bind_int64(st.s, 6, r.uid_base);
  sqlite3_bind_int64(st.s, 7, r.init_pid);
  sqlite3_bind_int64(st.s, 8, static_cast<int64_t>(r.init_start_time));
  sqlite3_bind_int(st.s, 9, r.on_disk ? 1 : 0);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "put sandbox");
  return {};
}

Status StateDb::Remove(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM sandboxes WHERE id = ?", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare remove");
  sqlite3_bind_text(st.s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "remove sandbox");
  return {};
}

Result<std::vector<SandboxRow>> StateDb::LoadAll() {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "SELECT id, state, spec_json, created_at, expires_at_ms, uid_base, init_pid, init_start_time, on_disk "
      "FROM sandboxes ORDER BY created_at";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare load");
  std::vector<SandboxRow> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    SandboxRow r;
    auto text = [&](int i) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, i))); };
    r.id = text(0);
    r.state = text(1);
    r.spec_json = text(2);
    r.created_at = text(3);
    r.expires_at_ms = sqlite3_column_int64(st.s, 4);
    r.uid_base = static_cast<uint32_t>(sqlite3_column_int64(st.s, 5));
    r.init_pid = sqlite3_column_int64(st.s, 6);
    r.init_start_time = static_cast<uint64_t>(sqlite3_column_int64(st.s, 7));
    r.on_disk = sqlite3_column_int(st.s, 8) != 0;
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return DbError(db_, "load sandboxes");
  return rows;
}

}  // namespace bulkhead::store
