// The daemon's durable state in SQLite (WAL): one row per sandbox with what is needed to
// find it again after a restart. Thread-safe (one connection behind a mutex).
#pragma once
#include <sqlite3.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace bulkhead::store {

struct SandboxRow {
  std::string id;
  std::string state;       // running | paused | stopped | error | pooled
  std::string spec_json;   // core::SandboxSpec as JSON
  std::string created_at;  // RFC 3339
  int64_t expires_at_ms = 0;  // unix milliseconds; 0 = never
  uint32_t uid_base = 0;
  int64_t init_pid = 0;
  uint64_t init_start_time = 0;
  bool on_disk = false;  // paused to disk: its memory image in its directory, no process runs
};

// One egress record (net::EgressRecord without the live-only fields), as stored.
struct EgressRow {
  int64_t id = 0;
  std::string sandbox_id;
  int64_t time_ms = 0;
  std::string protocol, name, address;
  int64_t port = 0;
  std::string query_type;
  bool allowed = false;
  std::string reason;
  int64_t bytes_out = 0, bytes_in = 0, duration_ms = 0;
};

// A named volume (volume_rows.cc). Written before its directory exists, removed after it is gone.
struct VolumeRow {
  std::string tenant;  // "" for the host's; a name is unique within its tenant
  std::string name;
  int64_t size_mb = 0;
  std::string created_at;  // RFC 3339
};

// A snapshot (snapshot_rows.cc). Written "creating" before any of its files exist and
// "ready" once they are complete: a daemon start removes rows still "creating" and their files.
struct SnapshotRow {
  std::string id;
  std::string name;        // "" = none given
  std::string sandbox_id;  // the sandbox it was taken of (which may be gone since)
  std::string created_at;  // RFC 3339
  int64_t size_bytes = 0;
  std::string image;
  std::string spec_json;   // the sandbox's core::SandboxSpec as JSON when it was taken
  uint32_t uid_base = 0;   // the host uid range its files' owners are in
  std::string state;       // creating | ready
  // "" for files only; else the format of its memory image (Tier::MemoryFormat), which only a
  // tier of that format restores.
  std::string memory;
};

// A tenant (access_rows.cc): a name its sandboxes, snapshots and keys are kept under.
struct TenantRow {
  std::string name;
  std::string created_at;  // RFC 3339
};

// An API key of a tenant's (access_rows.cc): the SHA-256 of its secret, never the secret.
struct ApiKeyRow {
  std::string id;
  std::string tenant;
  std::string scope;  // tenant-admin | user | read-only
  std::string name;
  std::string secret_sha256;  // hex
  std::string created_at;     // RFC 3339
  int64_t expires_at_ms = 0;  // unix milliseconds; 0 = never
  int64_t revoked_at_ms = 0;  // 0 = not revoked
};

// A prepared statement, finalized on scope exit.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};
Error DbError(sqlite3* db, const std::string& what);

class StateDb {
 public:
  static Result<std::unique_ptr<StateDb>> Open(const std::string& path);
  ~StateDb();

  Status Put(const SandboxRow& row);  // insert or replace
  Status Remove(const std::string& id);
  Result<std::vector<SandboxRow>> LoadAll();

  // The egress log (egress_log.cc). Each sandbox keeps its last kEgressKept records.
  static constexpr int64_t kEgressKept = 10000;
  Result<int64_t> InsertEgress(const EgressRow& row);  // answers the row id
  Status FinishEgress(int64_t id, int64_t bytes_out, int64_t bytes_in, int64_t duration_ms, const std::string& reason);
  Result<std::vector<EgressRow>> LoadEgress(const std::string& sandbox_id, int64_t limit);  // oldest first
  Status RemoveEgress(const std::string& sandbox_id);
  // Removes the records of every sandbox made before `before_ms` (--egress-keep-days); answers how many.
  Result<int64_t> PruneEgress(int64_t before_ms);

  // Named volumes (volume_rows.cc). InsertVolume: kConflict "volume_exists" if the name is taken.
  Status InsertVolume(const VolumeRow& row);
  Status RemoveVolume(const std::string& tenant, const std::string& name);
  Result<std::vector<VolumeRow>> LoadVolumes();  // by tenant, then name
  // Snapshots (snapshot_rows.cc).
  Status PutSnapshot(const SnapshotRow& row);  // insert or replace
  Status RemoveSnapshot(const std::string& id);
  Result<std::vector<SnapshotRow>> LoadSnapshots();  // oldest first
  // Tenants and API keys (access_rows.cc). InsertTenant: kConflict "tenant_exists" if taken.
  Status InsertTenant(const TenantRow& row);
  Status RemoveTenant(const std::string& name);  // and its keys
  Result<std::vector<TenantRow>> LoadTenants();  // by name
  Status PutApiKey(const ApiKeyRow& row);        // insert or replace
  Result<std::vector<ApiKeyRow>> LoadApiKeys();  // oldest first
  // Tenants' quotas (access_rows.cc), by tenant: the JSON of core::QuotaToJson. An empty
  // object removes the row; RemoveTenant removes it too.
  Status PutTenantQuota(const std::string& tenant, const std::string& quota_json);
  Result<std::vector<std::pair<std::string, std::string>>> LoadTenantQuotas();
  // Tenants' egress rules, the same way: the JSON of core::TenantEgressToJson.
  Status PutTenantEgress(const std::string& tenant, const std::string& egress_json);
  Result<std::vector<std::pair<std::string, std::string>>> LoadTenantEgress();

 private:
  // A per-tenant JSON row of `table` (tenant, json_column): "{}" removes it.
  Status PutTenantJson(const char* table, const char* column, const std::string& tenant, const std::string& text);
  Result<std::vector<std::pair<std::string, std::string>>> LoadTenantJson(const char* table, const char* column);

  explicit StateDb(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  // Whether `table` has `column` (a migration adds it once, whatever the version says).
  bool HasColumn(const std::string& table, const std::string& column);
  Status Migrate();
  sqlite3* db_;
  std::mutex mu_;
};

}  // namespace bulkhead::store
