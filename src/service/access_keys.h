// Who may talk to the daemon: the host's admin key (api_key.h) and the API keys of tenants,
// each with a scope, an expiry and a revocation that holds from the moment it is made. A key
// is shown once, at its creation ("bhk_<id>_<secret>"); the state database keeps its secret's
// SHA-256 only. Lookups are served from memory (every request makes one); changes are written
// to the database first.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/state_db.h"

namespace bulkhead::api {

// What a key may do, least first. kAdmin is the host's key alone.
enum class Scope { kReadOnly, kUser, kTenantAdmin, kAdmin };
std::string_view ScopeName(Scope scope);  // "read-only", "user", "tenant-admin", "admin"
std::optional<Scope> ParseScope(std::string_view name);

// The caller of a request, as its key says. tenant "" with kAdmin: the host's admin.
struct Caller {
  std::string tenant;
  Scope scope = Scope::kAdmin;
  std::string key_id = "admin";  // for the audit log
  bool HostAdmin() const { return scope == Scope::kAdmin; }
};

struct KeyInfo {
  std::string id, tenant, name, created_at;
  Scope scope = Scope::kUser;
  int64_t expires_at_ms = 0;  // 0: never
  int64_t revoked_at_ms = 0;  // 0: not revoked
};

struct NewKey {
  KeyInfo info;
  std::string secret;  // the whole key, "bhk_<id>_<secret>": shown this once
};

class AccessKeys {
 public:
  // Loads the tenants and keys of `db_path` (the daemon's state database). `admin_key` is the
  // host's key (api_key.h): it authenticates as the host's admin, as it always has.
  static Result<std::unique_ptr<AccessKeys>> Open(const std::string& db_path, std::string admin_key);

  // The caller an Authorization header value ("Bearer <key>") names; nullopt for no key, an
  // unknown, expired or revoked one, or a key of a tenant since removed.
  std::optional<Caller> Authenticate(std::string_view authorization) const;

  // Tenants: names of 1 to 63 of [a-z0-9-], starting with a letter or digit.
  Status CreateTenant(const std::string& name);
  std::vector<store::TenantRow> Tenants() const;
  bool HasTenant(const std::string& name) const;
  // Removes the tenant and revokes its keys (the caller made sure it owns nothing).
  Status RemoveTenant(const std::string& name);

  // A key of `tenant` (which exists) with `scope` (not kAdmin), valid for `ttl_s` seconds (0:
  // until revoked).
  Result<NewKey> CreateKey(const std::string& tenant, Scope scope, const std::string& name, int64_t ttl_s);
  // The keys of `tenant`, or of every tenant for "" (revoked ones too: when they were revoked).
  std::vector<KeyInfo> Keys(const std::string& tenant) const;
  std::optional<KeyInfo> Key(const std::string& id) const;
  Status Revoke(const std::string& id);

 private:
  AccessKeys(std::unique_ptr<store::StateDb> db, std::string admin_key)
      : db_(std::move(db)), admin_key_(std::move(admin_key)) {}
  struct Entry {
    KeyInfo info;
    std::string secret_sha256;  // hex, as stored
  };

  std::unique_ptr<store::StateDb> db_;
  const std::string admin_key_;
  mutable std::mutex mu_;
  std::map<std::string, store::TenantRow> tenants_;
  std::map<std::string, Entry> keys_;  // by id
};

// Whether `name` may name a tenant (see CreateTenant).
bool ValidTenantName(std::string_view name);

}  // namespace bulkhead::api
