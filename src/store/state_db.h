// The daemon's durable state in SQLite (WAL): one row per sandbox with what is needed to
// find it again after a restart. Thread-safe (one connection behind a mutex).
#pragma once
#include <sqlite3.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
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
};

class StateDb {
 public:
  static Result<std::unique_ptr<StateDb>> Open(const std::string& path);
  ~StateDb();

  Status Put(const SandboxRow& row);  // insert or replace
  Status Remove(const std::string& id);
  Result<std::vector<SandboxRow>> LoadAll();

 private:
  explicit StateDb(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  Status Migrate();
  sqlite3* db_;
  std::mutex mu_;
};

}  // namespace bulkhead::store
