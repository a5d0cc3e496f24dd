// Chooses and sets up the layer area: the loop-mounted quota filesystem when it can be
// had, plain directories (no disk cap) when it cannot.
#include "storage/layer_area.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "storage/fs_util.h"
#include "storage/loop_mount.h"
#include "common/run_program.h"

namespace bulkhead::storage {
namespace {

constexpr int64_t kGiB = 1024LL * 1024 * 1024;
constexpr int64_t kMinImageBytes = 4 * kGiB;
constexpr int64_t kMaxDerivedImageBytes = 256 * kGiB;

class PlainLayerArea final : public LayerArea {
 public:
  using LayerArea::LayerArea;
  std::string backend() const override { return "none"; }
  bool enforced() const override { return false; }
  Status CreateLayerDir(const std::string& id, int64_t) override {
    std::string path = LayerPath(id);
    if (::mkdir(path.c_str(), 0700) != 0) return SystemError("mkdir " + path, errno);
    return {};
  }
  Status SetLimit(const std::string& id, int64_t) override {
    if (::access(LayerPath(id).c_str(), F_OK) != 0) return MakeError(ErrorCode::kNotFound, "no layer " + id);
    return {};
  }
  Result<int64_t> UsageBytes(const std::string& id) const override {
    if (::access(LayerPath(id).c_str(), F_OK) != 0) return MakeError(ErrorCode::kNotFound, "no layer " + id);
    return TreeAllocatedBytes(LayerPath(id));
  }
  Status DestroyLayerDir(const std::string& id) override { return RemoveTree(LayerPath(id)); }
};

int64_t ImageBytes(const std::string& state_dir, int64_t size_gb) {
  if (size_gb > 0) return std::max(size_gb * kGiB, kMinImageBytes);
  struct statvfs vfs {};
  int64_t derived = kMinImageBytes;
  if (::statvfs(state_dir.c_str(), &vfs) == 0) {
    int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    derived = std::min(kMaxDerivedImageBytes, free_bytes / 10 * 9);
  }
  return std::max(derived, kMinImageBytes);
}

bool HasOption(const std::string& options, const std::string& name) {
  return ("," + options + ",").find("," + name + ",") != std::string::npos;
}

// Opens the area on a filesystem already mounted at mount_point (a daemon restart).
Result<std::unique_ptr<LayerArea>> OpenMounted(const MountEntry& mount) {
  if (mount.fs_type == "xfs") {
    if (!HasOption(mount.super_options, "prjquota") && !HasOption(mount.super_options, "pquota")) {
      return MakeError(ErrorCode::kUnavailable, mount.mount_point + " is xfs without prjquota");
    }
    return OpenXfsLayerArea(mount.mount_point, mount.source);
  }
  if (mount.fs_type == "btrfs") return OpenBtrfsLayerArea(mount.mount_point);
  return MakeError(ErrorCode::kUnavailable, mount.mount_point + " is " + mount.fs_type + ", not xfs or btrfs");
}

Result<std::unique_ptr<LayerArea>> MountAndOpen(const std::string& image, const std::string& mount_point,
                                                FsType type) {
  if (type == FsType::kXfs) {
    auto device = MountImage(image, mount_point, "xfs", "prjquota");
    if (!device.ok()) return device.error();
    return OpenXfsLayerArea(mount_point, *device);
  }
  auto device = MountImage(image, mount_point, "btrfs", "");
  if (!device.ok()) return device.error();
  return OpenBtrfsLayerArea(mount_point);
}

// An existing storage image must be of the kind the requested driver uses.
Status CheckDriverMatches(const std::string& driver, const std::string& fs_type, const std::string& where) {
  if (driver == "btrfs" && fs_type != "btrfs") {
    return MakeError(ErrorCode::kInvalid, "--storage-driver btrfs, but " + where + " is " + fs_type +
                                              ": use --storage-driver overlay or a new state dir");
  }
  if (driver == "overlay" && fs_type == "btrfs") {
    return MakeError(ErrorCode::kInvalid, "--storage-driver overlay, but " + where +
                                              " is btrfs: use --storage-driver btrfs or a new state dir");
  }
  return {};
}

Result<std::unique_ptr<LayerArea>> OpenQuotaArea(const std::string& state_dir, int64_t size_gb,
                                                 const std::string& driver) {
  std::string image = state_dir + "/storage.img";
  std::string mount_point = state_dir + "/storage";
  BH_TRY(MakeDir(mount_point, 0700));
  if (auto mounted = FindMount(mount_point)) {
    BH_TRY(CheckDriverMatches(driver, mounted->fs_type, mount_point));
    return OpenMounted(*mounted);
  }

  if (::access("/dev/loop-control", R_OK | W_OK) != 0) {
    return MakeError(ErrorCode::kUnavailable, "no loop devices (/dev/loop-control)");
  }
  BH_TRY(CreateSparseImage(image, ImageBytes(state_dir, size_gb)));
  auto type = ProbeFilesystem(image);
  if (!type.ok()) return type.error();
  if (*type == FsType::kXfs || *type == FsType::kBtrfs) {
    BH_TRY(CheckDriverMatches(driver, *type == FsType::kXfs ? "xfs" : "btrfs", image));
    return MountAndOpen(image, mount_point, *type);
  }
  if (*type == FsType::kOther) return MakeError(ErrorCode::kUnavailable, image + " holds an unknown filesystem");
  if (driver == "btrfs") {
    BH_TRY(MakeFilesystem(image, FsType::kBtrfs));
    return MountAndOpen(image, mount_point, FsType::kBtrfs);
  }

  // A fresh image: XFS project quotas first; kernels built without XFS quota support
  // refuse the prjquota mount, and then btrfs qgroups (the image is still empty).
  Error xfs_error;
  if (auto made = MakeFilesystem(image, FsType::kXfs); made.ok()) {
    auto area = MountAndOpen(image, mount_point, FsType::kXfs);
    if (area.ok()) return area;
    xfs_error = area.error();
  } else {
    xfs_error = made.error();
  }
  if (FindMount(mount_point) || driver == "overlay") return xfs_error;  // never reformat a mounted image
  auto made = MakeFilesystem(image, FsType::kBtrfs);
  if (!made.ok()) {
    return MakeError(ErrorCode::kUnavailable, "xfs: " + xfs_error.message + "; btrfs: " + made.error().message);
  }
  auto area = MountAndOpen(image, mount_point, FsType::kBtrfs);
  if (!area.ok()) {
    return MakeError(ErrorCode::kUnavailable, "xfs: " + xfs_error.message + "; btrfs: " + area.error().message);
  }
  spdlog::info("storage: xfs project quotas unavailable ({}); using btrfs qgroups", xfs_error.message);
  return area;
}

}  // namespace

Result<std::unique_ptr<LayerArea>> OpenLayerArea(const std::string& state_dir, int64_t size_gb,
                                                 const std::string& driver) {
  if (!driver.empty() && driver != "overlay" && driver != "btrfs") {
    return MakeError(ErrorCode::kInvalid, "unknown storage driver \"" + driver + "\" (overlay or btrfs)");
  }
  auto area = OpenQuotaArea(state_dir, size_gb, driver);
  if (area.ok()) {
    // The filesystem's own root, over the mount point: as closed as every other state directory.
    if (::chmod((state_dir + "/storage").c_str(), 0700) != 0) return SystemError("chmod " + state_dir + "/storage", errno);
    return area;
  }
  // A refusal, or a btrfs area asked for and not had: no silent fallback.
  if (area.error().code == ErrorCode::kInvalid || driver == "btrfs") return area.error();

  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn("storage: disk quotas are NOT enforced, sandbox layers go to plain directories under {}/layers: {}",
                 state_dir, area.error().message);
  }
  return OpenPlainLayerArea(state_dir + "/layers");
}

Status LayerArea::CaptureSnapshot(const std::string& layer_id, const std::string& snapshot_id) {
  std::string dir = SnapshotPath(snapshot_id);
  if (::mkdir(dir.c_str(), 0700) != 0) return SystemError("mkdir " + dir, errno);
  return CopyTree(LayerPath(layer_id) + "/upper", dir + "/upper");
}

Status LayerArea::CreateLayerFrom(const std::string& id, const std::string& source_dir, int64_t disk_mb,
                                  const IdShift& shift) {
  BH_TRY(CreateLayerDir(id, disk_mb));
  // Made inside the new layer, the copies take its quota (XFS: the inherited project id).
  Status copied = CopyTree(source_dir + "/upper", LayerPath(id) + "/upper", shift);
  if (!copied.ok()) (void)DestroyLayerDir(id);
  return copied;
}

Status LayerArea::DestroySnapshotDir(const std::string& id) { return RemoveTree(SnapshotPath(id)); }

Status LayerArea::CreateSnapshotDir(const std::string& id) {
  std::string dir = SnapshotPath(id);
  if (::mkdir(dir.c_str(), 0700) != 0) return SystemError("mkdir " + dir, errno);
  return {};
}

Result<std::unique_ptr<LayerArea>> OpenPlainLayerArea(const std::string& root) {
  BH_TRY(MakeDir(root, 0700));
  return std::unique_ptr<LayerArea>(std::make_unique<PlainLayerArea>(root));
}

}  // namespace bulkhead::storage
