#include "service/access_keys.h"

#include "common/digest.h"
#include "common/random_hex.h"
#include "common/time_format.h"
#include "service/api_key.h"

namespace bulkhead::api {
namespace {

constexpr std::string_view kKeyPrefix = "bhk_";
constexpr size_t kIdBytes = 8;       // 16 hex digits
constexpr size_t kSecretBytes = 32;  // 64 hex digits

}  // namespace

std::string_view ScopeName(Scope scope) {
  switch (scope) {
    case Scope::kReadOnly: return "read-only";
    case Scope::kUser: return "user";
    case Scope::kTenantAdmin: return "tenant-admin";
    case Scope::kAdmin: return "admin";
  }
  return "?";
}

std::optional<Scope> ParseScope(std::string_view name) {
  for (Scope scope : {Scope::kReadOnly, Scope::kUser, Scope::kTenantAdmin, Scope::kAdmin})
    if (ScopeName(scope) == name) return scope;
  return std::nullopt;
}

bool ValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 63 || name.front() == '-') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

Result<std::unique_ptr<AccessKeys>> AccessKeys::Open(const std::string& db_path, std::string admin_key) {
  auto db = store::StateDb::Open(db_path);
  if (!db) return db.error();
  auto tenants = (*db)->LoadTenants();
  if (!tenants) return tenants.error();
  auto keys = (*db)->LoadApiKeys();
  if (!keys) return keys.error();
  std::unique_ptr<AccessKeys> out(new AccessKeys(std::move(*db), std::move(admin_key)));
  for (auto& row : *tenants) out->tenants_[row.name] = row;
  for (auto& row : *keys) {
    const std::optional<Scope> scope = ParseScope(row.scope);
    if (!scope || *scope == Scope::kAdmin) continue;  // (never written so)
    out->keys_[row.id] = Entry{{row.id, row.tenant, row.name, row.created_at, *scope, row.expires_at_ms, row.revoked_at_ms},
                               row.secret_sha256};
  }
  return out;
}

std::optional<Caller> AccessKeys::Authenticate(std::string_view authorization) const {
  const std::optional<std::string_view> token = BearerToken(authorization);
  if (!token) return std::nullopt;
  if (!admin_key_.empty() && ConstantTimeEquals(*token, admin_key_)) return Caller{};
  // bhk_<id>_<secret>: the id finds the key, the secret's hash must match its own.
  if (!token->starts_with(kKeyPrefix)) return std::nullopt;
  const std::string_view rest = token->substr(kKeyPrefix.size());
  const size_t cut = rest.find('_');
  if (cut == std::string_view::npos) return std::nullopt;
  const std::string id(rest.substr(0, cut));
  const std::string secret_hash = HexEncode(Sha256(rest.substr(cut + 1)));
  std::lock_guard lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return std::nullopt;
  const Entry& entry = it->second;
  if (!ConstantTimeEquals(secret_hash, entry.secret_sha256)) return std::nullopt;
  if (entry.info.revoked_at_ms != 0) return std::nullopt;
  if (entry.info.expires_at_ms != 0 && UnixMillis() >= entry.info.expires_at_ms) return std::nullopt;
  if (!tenants_.contains(entry.info.tenant)) return std::nullopt;
  return Caller{entry.info.tenant, entry.info.scope, entry.info.id};
}

Status AccessKeys::CreateTenant(const std::string& name) {
  if (!ValidTenantName(name))
    return MakeError(ErrorCode::kInvalid, "a tenant's name is 1 to 63 of a-z, 0-9 and '-', not starting with '-'");
  store::TenantRow row{name, Rfc3339Millis(UnixMillis())};
  std::lock_guard lock(mu_);
  BH_TRY(db_->InsertTenant(row));
  tenants_[name] = row;
  return {};
}

std::vector<store::TenantRow> AccessKeys::Tenants() const {
  std::lock_guard lock(mu_);
  std::vector<store::TenantRow> out;
  for (const auto& [name, row] : tenants_) out.push_back(row);
  return out;
}

bool AccessKeys::HasTenant(const std::string& name) const {
  std::lock_guard lock(mu_);
  return tenants_.contains(name);
}

Status AccessKeys::RemoveTenant(const std::string& name) {
  std::lock_guard lock(mu_);
  if (!tenants_.contains(name)) return MakeError(ErrorCode::kNotFound, "no tenant " + name);
  BH_TRY(db_->RemoveTenant(name));
  tenants_.erase(name);
  std::erase_if(keys_, [&](const auto& item) { return item.second.info.tenant == name; });
  return {};
}

Result<NewKey> AccessKeys::CreateKey(const std::string& tenant, Scope scope, const std::string& name, int64_t ttl_s) {
  if (scope == Scope::kAdmin)
    return MakeError(ErrorCode::kInvalid, "a tenant's key is tenant-admin, user or read-only: admin is the host's key");
  if (ttl_s < 0 || ttl_s > int64_t{10} * 365 * 24 * 3600)
    return MakeError(ErrorCode::kInvalid, "ttl_s is 0 (no expiry) up to ten years");
  if (name.size() > 200) return MakeError(ErrorCode::kInvalid, "a key's name is at most 200 bytes");
  auto id = RandomHex(kIdBytes);
  if (!id) return id.error();
  auto secret = RandomHex(kSecretBytes);
  if (!secret) return secret.error();
  const int64_t now = UnixMillis();
  Entry entry{{*id, tenant, name, Rfc3339Millis(now), scope, ttl_s ? now + ttl_s * 1000 : 0, 0},
              HexEncode(Sha256(*secret))};
  store::ApiKeyRow row{entry.info.id, tenant, std::string(ScopeName(scope)), name, entry.secret_sha256,
                       entry.info.created_at, entry.info.expires_at_ms, 0};
  std::lock_guard lock(mu_);
  if (!tenants_.contains(tenant)) return MakeError(ErrorCode::kNotFound, "no tenant " + tenant);
  BH_TRY(db_->PutApiKey(row));
  keys_[*id] = entry;
  return NewKey{entry.info, std::string(kKeyPrefix) + *id + "_" + *secret};
}

std::vector<KeyInfo> AccessKeys::Keys(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  std::vector<KeyInfo> out;
  for (const auto& [id, entry] : keys_)
    if (tenant.empty() || entry.info.tenant == tenant) out.push_back(entry.info);
  return out;
}

std::optional<KeyInfo> AccessKeys::Key(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return std::nullopt;
  return it->second.info;
}

Status AccessKeys::Revoke(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return MakeError(ErrorCode::kNotFound, "no key " + id);
  if (it->second.info.revoked_at_ms != 0) return {};
  const KeyInfo& info = it->second.info;
  store::ApiKeyRow row{info.id, info.tenant, std::string(ScopeName(info.scope)), info.name,
                       it->second.secret_sha256, info.created_at, info.expires_at_ms, UnixMillis()};
  BH_TRY(db_->PutApiKey(row));
  it->second.info.revoked_at_ms = row.revoked_at_ms;
  return {};
}

}  // namespace bulkhead::api
