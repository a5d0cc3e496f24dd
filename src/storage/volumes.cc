// Named volumes: layers of the layer area under their own id namespace (vol-<name>), so they
// get the same hard size cap as a sandbox's writable layer.
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

Status CheckVolumeName(const std::string& name) {
  if (!IsSafeName(name) || name.size() > 63)
    return MakeError(ErrorCode::kInvalid, "invalid volume name: " + name);
  return {};
}

}  // namespace

std::string Storage::VolumeLayerId(const std::string& name) const { return kVolumeLayerPrefix + name; }

Result<std::string> Storage::CreateVolume(const std::string& name, int64_t size_mb) {
  BH_TRY(CheckVolumeName(name));
  if (size_mb <= 0) return MakeError(ErrorCode::kInvalid, "size_mb must be positive");
  const std::string id = VolumeLayerId(name);
  const std::string dir = layers_->LayerPath(id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) return MakeError(ErrorCode::kConflict, "volume " + name + " exists on disk");
  BH_TRY(layers_->CreateLayerDir(id, size_mb));
  ScopeGuard undo([&] { (void)layers_->DestroyLayerDir(id); });
  if (::chmod(dir.c_str(), 0700) != 0) return SystemError("chmod " + dir, errno);
  BH_TRY(MakeDir(dir + "/data", 0755, kStoredIdBase, kStoredIdBase));  // the volume's root, as root's
  undo.Dismiss();
  return dir + "/data";
}

Result<std::string> Storage::VolumeDir(const std::string& name) const {
  BH_TRY(CheckVolumeName(name));
  const std::string data = layers_->LayerPath(VolumeLayerId(name)) + "/data";
  struct stat st;
  if (::lstat(data.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return MakeError(ErrorCode::kNotFound, "no volume " + name + " on disk", "volume_not_found");
  return data;
}

Result<int64_t> Storage::VolumeUsageBytes(const std::string& name) const {
  BH_TRY(CheckVolumeName(name));
  return layers_->UsageBytes(VolumeLayerId(name));
}

Status Storage::DestroyVolume(const std::string& name) {
  BH_TRY(CheckVolumeName(name));
  return layers_->DestroyLayerDir(VolumeLayerId(name));
}

std::vector<std::string> Storage::ListVolumes() const {
  std::vector<std::string> names;
  DIR* dir = ::opendir(layers_->root().c_str());
  if (dir == nullptr) return names;
  while (dirent* e = ::readdir(dir)) {
    const std::string entry = e->d_name;
    if (!entry.starts_with(kVolumeLayerPrefix)) continue;
    std::string name = entry.substr(sizeof kVolumeLayerPrefix - 1);
    if (CheckVolumeName(name).ok()) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace bulkhead::storage
