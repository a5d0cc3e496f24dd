#include "core/volume_registry.h"

#include <spdlog/spdlog.h>

#include <ctime>

#include "common/time_format.h"

namespace bulkhead::core {

Error VolumeRegistry::NotFound(const std::string& name) {
  return MakeError(ErrorCode::kNotFound, "no volume named " + name, "volume_not_found");
}

VolumeInfo VolumeRegistry::InfoOf(const store::VolumeRow& row, const std::set<std::string>& users) const {
  VolumeInfo info;
  info.name = row.name;
  info.size_mb = row.size_mb;
  info.created_at = row.created_at;
  info.mounted_by.assign(users.begin(), users.end());
  if (auto used = storage_.VolumeUsageBytes(row.name)) info.used_bytes = *used;
  return info;
}

Status VolumeRegistry::Recover() {
  auto rows = db_.LoadVolumes();
  if (!rows) return rows.error();
  std::lock_guard lock(mu_);
  for (const auto& row : *rows) {
    if (!storage_.VolumeDir(row.name)) {
      spdlog::warn("recover: volume {} has no directory (a create or delete was cut short); dropping it", row.name);
      BH_TRY(db_.RemoveVolume(row.name));
      continue;
    }
    volumes_[row.name].row = row;
  }
  for (const auto& name : storage_.ListVolumes()) {
    if (volumes_.count(name)) continue;
    spdlog::warn("recover: removing the directory of volume {}, which has no row", name);
    BH_TRY(storage_.DestroyVolume(name));
  }
  return {};
}

Result<VolumeInfo> VolumeRegistry::Create(const std::string& name, int64_t size_mb) {
  {
    std::lock_guard lock(mu_);
    if (volumes_.count(name))
      return MakeError(ErrorCode::kConflict, "a volume named " + name + " exists", "volume_exists");
  }
  store::VolumeRow row{name, size_mb, Rfc3339(static_cast<time_t>(UnixMillis() / 1000))};
  // The row first: a crash before the directory is made leaves a row that Recover drops.
  BH_TRY(db_.InsertVolume(row));
  if (auto dir = storage_.CreateVolume(name, size_mb); !dir) {
    (void)db_.RemoveVolume(name);
    return dir.error();
  }
  {
    std::lock_guard lock(mu_);
    volumes_[name].row = row;
  }
  return InfoOf(row, {});
}

Result<VolumeInfo> VolumeRegistry::Get(const std::string& name) const {
  store::VolumeRow row;
  std::set<std::string> users;
  {
    std::lock_guard lock(mu_);
    auto it = volumes_.find(name);
    if (it == volumes_.end() || it->second.deleting) return NotFound(name);
    row = it->second.row;
    users = it->second.users;
  }
  return InfoOf(row, users);
}

std::vector<VolumeInfo> VolumeRegistry::List() const {
  std::vector<std::pair<store::VolumeRow, std::set<std::string>>> entries;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, entry] : volumes_)
      if (!entry.deleting) entries.emplace_back(entry.row, entry.users);
  }
  std::vector<VolumeInfo> out;
  for (const auto& [row, users] : entries) out.push_back(InfoOf(row, users));
  return out;
}

Status VolumeRegistry::Delete(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    auto it = volumes_.find(name);
    if (it == volumes_.end() || it->second.deleting) return NotFound(name);
    if (!it->second.users.empty()) {
      std::string ids;
      for (const auto& id : it->second.users) ids += (ids.empty() ? "" : ", ") + id;
      return MakeError(ErrorCode::kConflict, "volume " + name + " is mounted by sandbox " + ids, "volume_in_use");
    }
    it->second.deleting = true;  // no sandbox may take it from here on
  }
  // The directory first: a crash after it leaves a row without a directory, which Recover drops.
  Status st = storage_.DestroyVolume(name);
  if (st) st = db_.RemoveVolume(name);
  std::lock_guard lock(mu_);
  if (!st) {
    volumes_[name].deleting = false;
    return st;
  }
  volumes_.erase(name);
  return {};
}

Result<std::vector<runtime::VolumeBind>> VolumeRegistry::Acquire(const std::string& sandbox_id,
                                                                 const std::vector<VolumeMount>& mounts) {
  std::vector<runtime::VolumeBind> binds;
  std::lock_guard lock(mu_);
  for (const auto& mount : mounts) {
    auto it = volumes_.find(mount.name);
    if (it == volumes_.end() || it->second.deleting) return NotFound(mount.name);
    auto dir = storage_.VolumeDir(mount.name);
    if (!dir) return dir.error();
    binds.push_back({*dir, mount.path, mount.read_only});
  }
  for (const auto& mount : mounts) volumes_[mount.name].users.insert(sandbox_id);
  return binds;
}

void VolumeRegistry::Attach(const std::string& sandbox_id, const std::vector<VolumeMount>& mounts) {
  std::lock_guard lock(mu_);
  for (const auto& mount : mounts) {
    auto it = volumes_.find(mount.name);
    if (it == volumes_.end()) {
      spdlog::warn("recover: sandbox {} lists volume {}, which is gone", sandbox_id, mount.name);
      continue;
    }
    it->second.users.insert(sandbox_id);
  }
}

void VolumeRegistry::Release(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  for (auto& [name, entry] : volumes_) entry.users.erase(sandbox_id);
}

}  // namespace bulkhead::core
