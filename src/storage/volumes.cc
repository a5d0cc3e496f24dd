// Named volumes: layers of the layer area under their own id namespace, so they get the same
// hard size cap as a sandbox's writable layer. The host's volume <name> is layer
// vol-<name>, a tenant's is vol-<tenant>+<name>: no name holds a '+', so the two never meet.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "storage/fs_util.h"
#include "storage/layer_area.h"
#include "storage/storage.h"

namespace bulkhead::storage {
namespace {

constexpr char kTenantSeparator = '+';

Status CheckVolumeKey(const VolumeKey& key) {
  if (!IsSafeName(key.name) || key.name.size() > 63)
    return MakeError(ErrorCode::kInvalid, "invalid volume name: " + key.name);
  if (!key.tenant.empty() && (!IsSafeName(key.tenant) || key.tenant.size() > 63))
    return MakeError(ErrorCode::kInvalid, "invalid tenant name: " + key.tenant);
  return {};
}

}  // namespace

Result<std::string> Storage::VolumeLayerId(const VolumeKey& key) {
  BH_TRY(CheckVolumeKey(key));
  if (key.tenant.empty()) return kVolumeLayerPrefix + key.name;
  return kVolumeLayerPrefix + key.tenant + kTenantSeparator + key.name;
}

Result<std::string> Storage::CreateVolume(const VolumeKey& key, int64_t size_mb) {
  auto layer = VolumeLayerId(key);
  if (!layer) return layer.error();
  const std::string& id = *layer;
  if (size_mb <= 0) return MakeError(ErrorCode::kInvalid, "size_mb must be positive");
  const std::string dir = layers_->LayerPath(id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) return MakeError(ErrorCode::kConflict, "volume " + key.name + " exists on disk");
  BH_TRY(layers_->CreateLayerDir(id, size_mb));
  ScopeGuard undo([&] { (void)layers_->DestroyLayerDir(id); });
  if (::chmod(dir.c_str(), 0700) != 0) return SystemError("chmod " + dir, errno);
  BH_TRY(MakeDir(dir + "/data", 0755, kStoredIdBase, kStoredIdBase));  // the volume's root, as root's
  undo.Dismiss();
  return dir + "/data";
}

Result<std::string> Storage::VolumeDir(const VolumeKey& key) const {
  auto id = VolumeLayerId(key);
  if (!id) return id.error();
  const std::string data = layers_->LayerPath(*id) + "/data";
  struct stat st;
  if (::lstat(data.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return MakeError(ErrorCode::kNotFound, "no volume " + key.name + " on disk", "volume_not_found");
  return data;
}

Result<int64_t> Storage::VolumeUsageBytes(const VolumeKey& key) const {
  auto id = VolumeLayerId(key);
  if (!id) return id.error();
  return layers_->UsageBytes(*id);
}

Status Storage::DestroyVolume(const VolumeKey& key) {
  auto id = VolumeLayerId(key);
  if (!id) return id.error();
  return layers_->DestroyLayerDir(*id);
}

std::vector<VolumeKey> Storage::ListVolumes() const {
  std::vector<VolumeKey> keys;
  DIR* dir = ::opendir(layers_->root().c_str());
  if (dir == nullptr) return keys;
  while (dirent* e = ::readdir(dir)) {
    const std::string entry = e->d_name;
    if (!entry.starts_with(kVolumeLayerPrefix)) continue;
    const std::string rest = entry.substr(sizeof kVolumeLayerPrefix - 1);
    VolumeKey key{.tenant = "", .name = rest};
    if (const size_t plus = rest.find(kTenantSeparator); plus != std::string::npos)
      key = {.tenant = rest.substr(0, plus), .name = rest.substr(plus + 1)};
    if (CheckVolumeKey(key).ok()) keys.push_back(std::move(key));
  }
  ::closedir(dir);
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace bulkhead::storage
