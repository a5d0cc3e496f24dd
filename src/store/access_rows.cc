// The tenants, api_keys, tenant_quotas and tenant_egress tables of the state database.
#include "store/state_db.h"

#include <fmt/format.h>

namespace bulkhead::store {
namespace {

std::string Text(sqlite3_stmt* st, int column) {
  const unsigned char* text = sqlite3_column_text(st, column);
  return text ? reinterpret_cast<const char*>(text) : "";
}

}  // namespace

Status StateDb::InsertTenant(const TenantRow& r) {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT INTO tenants (name, created_at) VALUES (?, ?)", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare tenant insert");
  sqlite3_bind_text(st.s, 1, r.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, r.created_at.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st.s);
  if (rc == SQLITE_CONSTRAINT)
    return MakeError(ErrorCode::kConflict, "a tenant named " + r.name + " exists", "tenant_exists");
  if (rc != SQLITE_DONE) return DbError(db_, "insert tenant");
  return {};
}

Status StateDb::RemoveTenant(const std::string& name) {
  std::lock_guard lock(mu_);
  for (const char* sql : {"DELETE FROM api_keys WHERE tenant = ?", "DELETE FROM tenant_quotas WHERE tenant = ?",
                          "DELETE FROM tenant_egress WHERE tenant = ?", "DELETE FROM tenants WHERE name = ?"}) {
    Stmt st;
    if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare tenant remove");
    sqlite3_bind_text(st.s, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "remove tenant");
  }
  return {};
}

Result<std::vector<TenantRow>> StateDb::LoadTenants() {
  std::lock_guard lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT name, created_at FROM tenants ORDER BY name", -1, &st.s, nullptr) != SQLITE_OK)
    return DbError(db_, "prepare tenant load");
  std::vector<TenantRow> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) rows.push_back({Text(st.s, 0), Text(st.s, 1)});
  if (rc != SQLITE_DONE) return DbError(db_, "load tenants");
  return rows;
}

Status StateDb::PutApiKey(const ApiKeyRow& r) {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "INSERT OR REPLACE INTO api_keys (id, tenant, scope, name, secret_sha256, created_at, expires_at_ms, "
      "revoked_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare key put");
  int column = 1;
  for (const std::string* text : {&r.id, &r.tenant, &r.scope, &r.name, &r.secret_sha256, &r.created_at})
    sqlite3_bind_text(st.s, column++, text->c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, column++, r.expires_at_ms);
  sqlite3_bind_int64(st.s, column, r.revoked_at_ms);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, "put key");
  return {};
}

Result<std::vector<ApiKeyRow>> StateDb::LoadApiKeys() {
  std::lock_guard lock(mu_);
  Stmt st;
  const char* sql =
      "SELECT id, tenant, scope, name, secret_sha256, created_at, expires_at_ms, revoked_at_ms FROM api_keys "
      "ORDER BY rowid";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare key load");
  std::vector<ApiKeyRow> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    ApiKeyRow r{Text(st.s, 0), Text(st.s, 1), Text(st.s, 2), Text(st.s, 3), Text(st.s, 4), Text(st.s, 5)};
    r.expires_at_ms = sqlite3_column_int64(st.s, 6);
    r.revoked_at_ms = sqlite3_column_int64(st.s, 7);
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return DbError(db_, "load keys");
  return rows;
}

Status StateDb::PutTenantJson(const char* table, const char* column, const std::string& tenant,
                              const std::string& text) {
  std::lock_guard lock(mu_);
  Stmt st;
  const bool remove = text == "{}";
  const std::string sql = remove ? fmt::format("DELETE FROM {} WHERE tenant = ?", table)
                                 : fmt::format("INSERT OR REPLACE INTO {} (tenant, {}) VALUES (?, ?)", table, column);
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare " + sql);
  sqlite3_bind_text(st.s, 1, tenant.c_str(), -1, SQLITE_TRANSIENT);
  if (!remove) sqlite3_bind_text(st.s, 2, text.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return DbError(db_, sql);
  return {};
}

Result<std::vector<std::pair<std::string, std::string>>> StateDb::LoadTenantJson(const char* table, const char* column) {
  std::lock_guard lock(mu_);
  Stmt st;
  const std::string sql = fmt::format("SELECT tenant, {} FROM {} ORDER BY tenant", column, table);
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return DbError(db_, "prepare " + sql);
  std::vector<std::pair<std::string, std::string>> rows;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) rows.emplace_back(Text(st.s, 0), Text(st.s, 1));
  if (rc != SQLITE_DONE) return DbError(db_, sql);
  return rows;
}

Status StateDb::PutTenantQuota(const std::string& tenant, const std::string& quota_json) {
  return PutTenantJson("tenant_quotas", "quota_json", tenant, quota_json);
}

Result<std::vector<std::pair<std::string, std::string>>> StateDb::LoadTenantQuotas() {
  return LoadTenantJson("tenant_quotas", "quota_json");
}

Status StateDb::PutTenantEgress(const std::string& tenant, const std::string& egress_json) {
  return PutTenantJson("tenant_egress", "egress_json", tenant, egress_json);
}

Result<std::vector<std::pair<std::string, std::string>>> StateDb::LoadTenantEgress() {
  return LoadTenantJson("tenant_egress", "egress_json");
}

}  // namespace bulkhead::store
