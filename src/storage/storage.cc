#include "storage/storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <set>
#include <nlohmann/json.hpp>

#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "storage/fs_util.h"
#include "storage/host_image.h"
#include "storage/image_import.h"
#include "storage/layer_area.h"
#include "common/time_format.h"

namespace bulkhead::storage {
namespace {

constexpr char kHostImage[] = "host";
constexpr char kTmpMarker[] = ".tmp-";  // in-flight imports and deletes: images/<name>.tmp-XXXXXX

bool IsValidImageName(const std::string& name) {
  return IsSafeName(name) && name.find(kTmpMarker) == std::string::npos;
}

std::vector<std::string> ListDirNames(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string MtimeRfc3339(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {};
  return Rfc3339(st.st_mtime);
}

Result<ImageInfo> ReadImageMeta(const std::string& image_dir) {
  auto text = ReadFile(image_dir + "/meta.json");
  if (!text.ok()) return text.error();
  auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return MakeError(ErrorCode::kInternal, "bad meta.json in " + image_dir);
  ImageInfo info;
  info.name = json.value("name", "");
  info.source = json.value("source", "");
  info.created_at = json.value("created_at", "");
  info.size_bytes = json.value("size_bytes", int64_t{0});
  return info;
}

// A tree stored by an older version, owned by host ids 0..65535 (so an image's setuid-root
// files were host root's): its owners move to the stored range. The root goes last, so an
// interrupted move (it touches only ids below kIdCount) is finished at the next start.
Status MoveToStoredIds(const std::string& root) {
  struct stat st;
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid >= kIdCount) return {};
  spdlog::info("storage: moving the owners of {} to the stored id range", root);
  return ShiftOwners(root, {0, kStoredIdBase, kIdCount});
}

Status CheckLayerId(const std::string& sandbox_id) {
  if (!IsSafeName(sandbox_id)) return MakeError(ErrorCode::kInvalid, "invalid sandbox id for a layer: " + sandbox_id);
  return {};
}

}  // namespace

Storage::Storage(std::string state_dir, std::unique_ptr<LayerArea> layers)
    : state_dir_(std::move(state_dir)), layers_(std::move(layers)), host_bind_dirs_(storage::HostBindDirs()) {}

Storage::~Storage() = default;

Result<std::unique_ptr<Storage>> Storage::Open(const std::string& state_dir, int64_t size_gb,
                                               const std::string& driver) {
  if (::mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + state_dir, errno);
  char resolved[PATH_MAX];
  if (::realpath(state_dir.c_str(), resolved) == nullptr) return SystemError("realpath " + state_dir, errno);
  std::string root = resolved;
  BH_TRY(MakeDir(root + "/images", 0700));
  // Imports and deletes that a crash interrupted.
  for (const auto& name : ListDirNames(root + "/images")) {
    if (name.find(kTmpMarker) != std::string::npos) (void)RemoveTree(root + "/images/" + name);
  }
  auto layers = OpenLayerArea(root, size_gb, driver);
  if (!layers.ok()) return layers.error();
  BH_TRY(MakeDir((*layers)->snapshots_root(), 0700));
  BH_TRY(MakeDir(root + "/memory", 0700));
  for (const auto& name : ListDirNames(root + "/images")) {
    if (name != kHostImage && IsValidImageName(name)) BH_TRY(MoveToStoredIds(root + "/images/" + name + "/rootfs"));
  }
  for (const auto& name : ListDirNames((*layers)->root())) {
    if (name.starts_with(kVolumeLayerPrefix)) BH_TRY(MoveToStoredIds((*layers)->LayerPath(name) + "/data"));
  }
  spdlog::info("storage: state {}, layers in {} (driver: {}, quota: {})", root, (*layers)->root(),
               (*layers)->driver(), (*layers)->backend());
  return std::unique_ptr<Storage>(new Storage(root, std::move(*layers)));
}

std::string Storage::ImagesDir() const { return state_dir_ + "/images"; }
std::string Storage::HostImageDir() const { return ImagesDir() + "/" + kHostImage; }
std::string Storage::LayerDir(const std::string& sandbox_id) const { return layers_->LayerPath(sandbox_id); }

// ---- images ----

Result<std::string> Storage::EnsureHostImage(const std::string& sudo_binary) {
  std::lock_guard lock(images_mu_);
  return EnsureHostImageAt(HostImageDir(), state_dir_, sudo_binary);
}

std::vector<std::string> Storage::HostBindDirs() const { return host_bind_dirs_; }

bool Storage::ImageExists(const std::string& name) const { return ImageRootfs(name).ok(); }

Result<std::string> Storage::ImageRootfs(const std::string& name) const {
  if (!IsValidImageName(name)) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  // For "host" this resolves the current-version symlink to the version directory.
  char resolved[PATH_MAX];
  std::string path = ImagesDir() + "/" + name + "/rootfs";
  struct stat st;
  if (::realpath(path.c_str(), resolved) == nullptr || ::stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  }
  return std::string(resolved);
}

Result<ImageInfo> Storage::ImportImage(const std::string& name, const std::string& tar_path) {
  if (name == kHostImage) return MakeError(ErrorCode::kConflict, "image name \"host\" is reserved", "image_exists");
  if (!IsValidImageName(name)) {
    return MakeError(ErrorCode::kInvalid, "invalid image name (letters, digits, . _ -): " + name);
  }
  std::string final_dir = ImagesDir() + "/" + name;
  if (::access(final_dir.c_str(), F_OK) == 0) {
    return MakeError(ErrorCode::kConflict, "image " + name + " exists", "image_exists");
  }
  std::string tmpl = ImagesDir() + "/" + name + kTmpMarker + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return SystemError("mkdtemp " + tmpl, errno);
  std::string tmp_dir = tmpl;
  ScopeGuard cleanup([&] { (void)RemoveTree(tmp_dir); });
  BH_TRY(MakeDir(tmp_dir, 0700));
  std::string rootfs = tmp_dir + "/rootfs";
  BH_TRY(MakeDir(rootfs, 0755, kStoredIdBase, kStoredIdBase));  // the image's "/"
  BH_TRY(ExtractRootfsTarball(tar_path, rootfs));
  BH_TRY(EnsureMountPoints(rootfs));

  ImageInfo info;
  info.name = name;
  info.source = "tarball";
  info.created_at = NowRfc3339();
  auto size = TreeAllocatedBytes(rootfs);
  info.size_bytes = size.ok() ? *size : 0;
  nlohmann::json meta = {{"name", info.name},
                         {"source", info.source},
                         {"created_at", info.created_at},
                         {"size_bytes", info.size_bytes}};
  BH_TRY(WriteFile(tmp_dir + "/meta.json", meta.dump(2) + "\n", 0644));

  std::lock_guard lock(images_mu_);
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {
      return MakeError(ErrorCode::kConflict, "image " + name + " exists", "image_exists");
    }
    return SystemError("rename " + tmp_dir, errno);
  }
  cleanup.Dismiss();
  spdlog::info("storage: imported image {} ({} bytes)", name, info.size_bytes);
  return info;
}

std::vector<ImageInfo> Storage::ListImages() const {
  std::vector<ImageInfo> images;
  ImageInfo host;
  host.name = kHostImage;
  host.source = "host";
  if (auto rootfs = ImageRootfs(kHostImage); rootfs.ok()) {
    host.created_at = MtimeRfc3339(*rootfs);
    auto size = TreeAllocatedBytes(*rootfs);
    host.size_bytes = size.ok() ? *size : 0;
  }
  images.push_back(host);
  for (const auto& name : ListDirNames(ImagesDir())) {
    if (name == kHostImage || !IsValidImageName(name)) continue;
    auto info = ReadImageMeta(ImagesDir() + "/" + name);
    if (!info.ok()) continue;
    info->name = name;
    images.push_back(*info);
  }
  return images;
}

Status Storage::DeleteImage(const std::string& name) {
  if (name == kHostImage) return MakeError(ErrorCode::kConflict, "the host image cannot be deleted", "image_in_use");
  if (!IsValidImageName(name)) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  std::string dir = ImagesDir() + "/" + name;
  std::string doomed;
  {
    std::lock_guard lock(images_mu_);
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
    }
    // Rename first so the name is free at once; the tree goes afterwards (or at next Open).
    std::string tmpl = ImagesDir() + "/" + name + kTmpMarker + "del-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return SystemError("mkdtemp " + tmpl, errno);
    doomed = tmpl;
    if (::rename(dir.c_str(), doomed.c_str()) != 0) return SystemError("rename " + dir, errno);
  }
  return RemoveTree(doomed);
}

// ---- layers ----

Result<WritableLayer> Storage::CreateLayer(const std::string& sandbox_id, uid_t host_uid, gid_t host_gid,
                                           int64_t disk_mb) {
  BH_TRY(CheckLayerId(sandbox_id));
  if (disk_mb <= 0) return MakeError(ErrorCode::kInvalid, "disk_mb must be positive");
  std::string dir = LayerDir(sandbox_id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) {
    return MakeError(ErrorCode::kConflict, "a layer for " + sandbox_id + " exists");
  }
  BH_TRY(layers_->CreateLayerDir(sandbox_id, disk_mb));
  ScopeGuard undo([&] { (void)layers_->DestroyLayerDir(sandbox_id); });
  WritableLayer layer{dir + "/upper", dir + "/work"};
  BH_TRY(MakeDir(layer.upper, 0755, host_uid, host_gid));
  BH_TRY(MakeDir(layer.upper + "/workspace", 0755, host_uid, host_gid));
  // Owned like upper/, so an overlay mounted from inside the sandbox's user namespace works too.
  BH_TRY(MakeDir(layer.work, 0700, host_uid, host_gid));
  undo.Dismiss();
  return layer;
}

Result<WritableLayer> Storage::GetLayer(const std::string& sandbox_id) const {
  BH_TRY(CheckLayerId(sandbox_id));
  std::string dir = LayerDir(sandbox_id);
  struct stat st;
  if (::lstat((dir + "/upper").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "no layer for " + sandbox_id);
  }
  return WritableLayer{dir + "/upper", dir + "/work"};
}

Status Storage::SetLayerQuota(const std::string& sandbox_id, int64_t disk_mb) {
  BH_TRY(CheckLayerId(sandbox_id));
  if (disk_mb <= 0) return MakeError(ErrorCode::kInvalid, "disk_mb must be positive");
  return layers_->SetLimit(sandbox_id, disk_mb);
}

Result<int64_t> Storage::LayerUsageBytes(const std::string& sandbox_id) const {
  BH_TRY(CheckLayerId(sandbox_id));
  return layers_->UsageBytes(sandbox_id);
}

Status Storage::DestroyLayer(const std::string& sandbox_id) {
  BH_TRY(CheckLayerId(sandbox_id));
  return layers_->DestroyLayerDir(sandbox_id);
}

std::vector<std::string> Storage::ListLayers() const {
  std::vector<std::string> ids;
  for (const auto& name : ListDirNames(layers_->root())) {
    if (IsSafeName(name) && !name.starts_with(kVolumeLayerPrefix)) ids.push_back(name);
  }
  return ids;
}

// ---- snapshots ----

Status Storage::CaptureSnapshot(const std::string& sandbox_id, const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(sandbox_id));
  BH_TRY(CheckLayerId(snapshot_id));
  struct stat st;
  if (::lstat(SnapshotDir(snapshot_id).c_str(), &st) == 0) {
    return MakeError(ErrorCode::kConflict, "a snapshot " + snapshot_id + " exists");
  }
  if (::lstat((LayerDir(sandbox_id) + "/upper").c_str(), &st) != 0) {
    return MakeError(ErrorCode::kNotFound, "no layer for " + sandbox_id);
  }
  Status st_capture = layers_->CaptureSnapshot(sandbox_id, snapshot_id);
  if (!st_capture.ok()) (void)layers_->DestroySnapshotDir(snapshot_id);
  return st_capture;
}

Result<WritableLayer> Storage::CreateLayerFromSnapshot(const std::string& sandbox_id, const std::string& snapshot_id,
                                                       const IdShift& owners, int64_t disk_mb) {
  BH_TRY(CheckLayerId(sandbox_id));
  BH_TRY(CheckLayerId(snapshot_id));
  if (disk_mb <= 0) return MakeError(ErrorCode::kInvalid, "disk_mb must be positive");
  std::string dir = LayerDir(sandbox_id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) return MakeError(ErrorCode::kConflict, "a layer for " + sandbox_id + " exists");
  if (::lstat((SnapshotDir(snapshot_id) + "/upper").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "no snapshot " + snapshot_id, "snapshot_not_found");
  }
  BH_TRY(layers_->CreateLayerFrom(sandbox_id, SnapshotDir(snapshot_id), disk_mb, owners));
  ScopeGuard undo([&] { (void)layers_->DestroyLayerDir(sandbox_id); });
  WritableLayer layer{dir + "/upper", dir + "/work"};
  // overlayfs wants an empty workdir of its own (a btrfs snapshot brought the old one along).
  BH_TRY(RemoveTree(layer.work));
  BH_TRY(MakeDir(layer.work, 0700, owners.to, owners.to));
  undo.Dismiss();
  return layer;
}

Status Storage::MakeSnapshotDir(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  return layers_->CreateSnapshotDir(snapshot_id);
}

Status Storage::SealSnapshot(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  return layers_->SealSnapshotDir(snapshot_id);
}

Status Storage::DestroySnapshot(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  BH_TRY(RemoveTree(MemoryDir(snapshot_id)));
  return layers_->DestroySnapshotDir(snapshot_id);
}

std::vector<std::string> Storage::ListSnapshots() const {
  std::set<std::string> ids;
  for (const std::string& dir : {layers_->snapshots_root(), MemoryRoot()}) {
    for (const auto& name : ListDirNames(dir)) {
      if (IsSafeName(name)) ids.insert(name);
    }
  }
  return {ids.begin(), ids.end()};
}

std::string Storage::MemoryRoot() const { return state_dir_ + "/memory"; }
std::string Storage::MemoryDir(const std::string& snapshot_id) const { return MemoryRoot() + "/" + snapshot_id; }

Result<std::string> Storage::MakeMemoryDir(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  const std::string dir = MemoryDir(snapshot_id);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return MakeError(ErrorCode::kConflict, "a memory image of " + snapshot_id + " exists");
    return SystemError("mkdir " + dir, errno);
  }
  return dir;
}

std::string Storage::SnapshotDir(const std::string& snapshot_id) const { return layers_->SnapshotPath(snapshot_id); }

Result<int64_t> Storage::SnapshotSizeBytes(const std::string& snapshot_id) const {
  BH_TRY(CheckLayerId(snapshot_id));
  auto files = TreeAllocatedBytes(SnapshotDir(snapshot_id) + "/upper");
  if (!files) return files.error();
  struct stat st;
  if (::lstat(MemoryDir(snapshot_id).c_str(), &st) != 0) return *files;
  auto memory = TreeAllocatedBytes(MemoryDir(snapshot_id));
  if (!memory) return memory.error();
  return *files + *memory;
}

std::string Storage::driver() const { return layers_->driver(); }

bool Storage::quotas_enforced() const { return layers_->enforced(); }
std::string Storage::quota_backend() const { return layers_->backend(); }

}  // namespace bulkhead::storage
