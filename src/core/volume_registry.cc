#include "core/volume_registry.h"

#include <spdlog/spdlog.h>

#include <ctime>

#include "common/time_format.h"

namespace bulkhead::core {
namespace {

storage::VolumeKey KeyOf(const store::VolumeRow& row) { return {.tenant = row.tenant, .name = row.name}; }

std::string Describe(const storage::VolumeKey& key) {
  return key.tenant.empty() ? key.name : key.name + " of tenant " + key.tenant;
}

}  // namespace

Error VolumeRegistry::NotFound(const storage::VolumeKey& key) {
  return MakeError(ErrorCode::kNotFound, "no volume named " + key.name, "volume_not_found");
}

VolumeInfo VolumeRegistry::InfoOf(const store::VolumeRow& row, const std::set<std::string>& users) const {
  VolumeInfo info;
  info.name = row.name;
  info.tenant = row.tenant;
  info.size_mb = row.size_mb;
  info.created_at = row.created_at;
  info.mounted_by.assign(users.begin(), users.end());
  if (auto used = storage_.VolumeUsageBytes(KeyOf(row))) info.used_bytes = *used;
  return info;
}

Status VolumeRegistry::Recover() {
  auto rows = db_.LoadVolumes();
  if (!rows) return rows.error();
  std::lock_guard lock(mu_);
  for (const auto& row : *rows) {
    if (!storage_.VolumeDir(KeyOf(row))) {
      spdlog::warn("recover: volume {} has no directory (a create or delete was cut short); dropping it",
                   Describe(KeyOf(row)));
      BH_TRY(db_.RemoveVolume(row.tenant, row.name));
      continue;
    }
    volumes_[KeyOf(row)].row = row;
  }
  for (const auto& key : storage_.ListVolumes()) {
    if (volumes_.count(key)) continue;
    spdlog::warn("recover: removing the directory of volume {}, which has no row", Describe(key));
    BH_TRY(storage_.DestroyVolume(key));
  }
  return {};
}

Result<VolumeInfo> VolumeRegistry::Create(const storage::VolumeKey& key, int64_t size_mb) {
  store::VolumeRow row{key.tenant, key.name, size_mb, Rfc3339(static_cast<time_t>(UnixMillis() / 1000))};
  {
    std::lock_guard lock(mu_);
    if (volumes_.count(key))
      return MakeError(ErrorCode::kConflict, "a volume named " + key.name + " exists", "volume_exists");
    Entry& entry = volumes_[key];
    entry.row = row;
    entry.creating = true;
  }
  auto made = [&]() -> Status {
    // The row first: a crash before the directory is made leaves a row that Recover drops.
    BH_TRY(db_.InsertVolume(row));
    if (auto dir = storage_.CreateVolume(key, size_mb); !dir) {
      (void)db_.RemoveVolume(key.tenant, key.name);
      return dir.error();
    }
    return {};
  }();
  {
    std::lock_guard lock(mu_);
    if (!made) {
      volumes_.erase(key);
      return made.error();
    }
    volumes_[key].creating = false;
  }
  return InfoOf(row, {});
}

Result<VolumeInfo> VolumeRegistry::Get(const storage::VolumeKey& key) const {
  store::VolumeRow row;
  std::set<std::string> users;
  {
    std::lock_guard lock(mu_);
    auto it = volumes_.find(key);
    if (it == volumes_.end() || it->second.creating || it->second.deleting) return NotFound(key);
    row = it->second.row;
    users = it->second.users;
  }
  return InfoOf(row, users);
}

std::vector<VolumeInfo> VolumeRegistry::List() const {
  std::vector<std::pair<store::VolumeRow, std::set<std::string>>> entries;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, entry] : volumes_)
      if (!entry.creating && !entry.deleting) entries.emplace_back(entry.row, entry.users);
  }
  std::vector<VolumeInfo> out;
  for (const auto& [row, users] : entries) out.push_back(InfoOf(row, users));
  return out;
}

std::pair<int64_t, int64_t> VolumeRegistry::UsageOf(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  int64_t count = 0, size_mb = 0;
  // The keys sort by tenant first: its volumes are one run.
  for (auto it = volumes_.lower_bound({tenant, ""}); it != volumes_.end() && it->first.tenant == tenant; ++it) {
    ++count;
    size_mb += it->second.row.size_mb;
  }
  return {count, size_mb};
}

std::set<std::string> VolumeRegistry::Tenants() const {
  std::lock_guard lock(mu_);
  std::set<std::string> tenants;
  for (const auto& [key, entry] : volumes_) tenants.insert(key.tenant);
  return tenants;
}

Status VolumeRegistry::Delete(const storage::VolumeKey& key) {
  {
    std::lock_guard lock(mu_);
    auto it = volumes_.find(key);
    if (it == volumes_.end() || it->second.creating || it->second.deleting) return NotFound(key);
    if (!it->second.users.empty()) {
      std::string ids;
      for (const auto& id : it->second.users) ids += (ids.empty() ? "" : ", ") + id;
      return MakeError(ErrorCode::kConflict, "volume " + key.name + " is mounted by sandbox " + ids, "volume_in_use");
    }
    it->second.deleting = true;  // no sandbox may take it from here on
  }
  // The directory first: a crash after it leaves a row without a directory, which Recover drops.
  Status st = storage_.DestroyVolume(key);
  if (st) st = db_.RemoveVolume(key.tenant, key.name);
  std::lock_guard lock(mu_);
  if (!st) {
    volumes_[key].deleting = false;
    return st;
  }
  volumes_.erase(key);
  return {};
}

Result<std::vector<runtime::VolumeBind>> VolumeRegistry::Acquire(const std::string& sandbox_id,
                                                                 const std::string& tenant,
                                                                 const std::vector<VolumeMount>& mounts) {
  std::vector<runtime::VolumeBind> binds;
  std::lock_guard lock(mu_);
  for (const auto& mount : mounts) {
    const storage::VolumeKey key{.tenant = tenant, .name = mount.name};
    auto it = volumes_.find(key);
    if (it == volumes_.end() || it->second.creating || it->second.deleting) return NotFound(key);
    auto dir = storage_.VolumeDir(key);
    if (!dir) return dir.error();
    binds.push_back({*dir, mount.path, mount.read_only});
  }
  for (const auto& mount : mounts) volumes_[{tenant, mount.name}].users.insert(sandbox_id);
  return binds;
}

void VolumeRegistry::Attach(const std::string& sandbox_id, const std::string& tenant,
                            const std::vector<VolumeMount>& mounts) {
  std::lock_guard lock(mu_);
  for (const auto& mount : mounts) {
    auto it = volumes_.find({tenant, mount.name});
    if (it == volumes_.end()) {
      spdlog::warn("recover: sandbox {} lists volume {}, which is gone", sandbox_id, mount.name);
      continue;
    }
    it->second.users.insert(sandbox_id);
  }
}

void VolumeRegistry::Release(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  for (auto& [key, entry] : volumes_) entry.users.erase(sandbox_id);
}

}  // namespace bulkhead::core
