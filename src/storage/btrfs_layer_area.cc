// Layers on btrfs with qgroups, like Docker's btrfs driver: each layer is a subvolume, and
// the subvolume's qgroup has a hard limit on referenced bytes (data and metadata).
#include <dirent.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <sys/ioctl.h>

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/layer_area.h"
#include "storage/qgroup_watch.h"
#include "common/run_program.h"

namespace bulkhead::storage {
namespace {

class BtrfsLayerArea final : public LayerArea {
 public:
  BtrfsLayerArea(std::string mount_point, std::string qgroups_sysfs, UniqueFd mount_fd)
      : LayerArea(mount_point + "/layers"),
        qgroups_sysfs_(std::move(qgroups_sysfs)),
        watch_(std::move(mount_fd), qgroups_sysfs_) {}

  std::string backend() const override { return "btrfs-qgroup"; }
  bool enforced() const override { return true; }

  Status CreateLayerDir(const std::string& id, int64_t disk_mb) override {
    UniqueFd parent = OpenDirNoFollow(root());
    if (!parent) return SystemError("open " + root(), errno);
    btrfs_ioctl_vol_args args{};
    std::strncpy(args.name, id.c_str(), BTRFS_PATH_NAME_MAX);
    if (::ioctl(parent.get(), BTRFS_IOC_SUBVOL_CREATE, &args) != 0) {
      return SystemError("create subvolume " + LayerPath(id), errno);
    }
    if (::chmod(LayerPath(id).c_str(), 0700) != 0) return SystemError("chmod " + LayerPath(id), errno);
    return SetLimit(id, disk_mb);
  }

  Status SetLimit(const std::string& id, int64_t disk_mb) override {
    UniqueFd layer = OpenLayer(id);
    if (!layer) return LayerOpenError(id);
    btrfs_ioctl_qgroup_limit_args args{};
    args.qgroupid = 0;  // 0 = the qgroup of the subvolume the fd is in
    if (disk_mb > 0) {
      args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
      args.lim.max_rfer = static_cast<uint64_t>(disk_mb) * 1024 * 1024;
    } else {
      // Clearing: the flag with "no limit" as value.
      args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
      args.lim.max_rfer = static_cast<uint64_t>(-1);
    }
    if (::ioctl(layer.get(), BTRFS_IOC_QGROUP_LIMIT, &args) != 0) {
      return SystemError("qgroup limit " + LayerPath(id), errno);
    }
    return {};
  }

  Result<int64_t> UsageBytes(const std::string& id) const override {
    UniqueFd layer = OpenLayer(id);
    if (!layer) return LayerOpenError(id);
    auto subvol = SubvolumeId(layer.get());
    if (!subvol.ok()) return subvol.error();
    // The qgroup's figure as of the last transaction commit.
    auto text = ReadFile(qgroups_sysfs_ + "/0_" + std::to_string(*subvol) + "/referenced");
    if (text.ok()) {
      int64_t bytes = 0;
      auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), bytes);
      (void)end;
      if (ec == std::errc()) return bytes;
    }
    return TreeAllocatedBytes(LayerPath(id));  // kernels without qgroups in sysfs
  }

  Status DestroyLayerDir(const std::string& id) override { return DestroySubvolume(root(), id); }

  std::string driver() const override { return "btrfs"; }

  // A read-only snapshot of the layer's subvolume: O(1) in the data it holds.
  Status CaptureSnapshot(const std::string& layer_id, const std::string& snapshot_id) override {
    UniqueFd layer = OpenLayer(layer_id);
    if (!layer) return LayerOpenError(layer_id);
    return Snapshot(layer.get(), snapshots_root(), snapshot_id, /*read_only=*/true);
  }

  // A writable snapshot of the source subvolume, its owners moved to the new range and its
  // qgroup capped; the extents stay shared until either side writes.
  Status CreateLayerFrom(const std::string& id, const std::string& source_dir, int64_t disk_mb,
                         const IdShift& shift) override {
    UniqueFd source = OpenDirNoFollow(source_dir);
    if (!source) return SystemError("open " + source_dir, errno);
    BH_TRY(Snapshot(source.get(), root(), id, /*read_only=*/false));
    Status st;
    if (::chmod(LayerPath(id).c_str(), 0700) != 0) st = SystemError("chmod " + LayerPath(id), errno);
    if (st.ok()) st = ShiftOwners(LayerPath(id) + "/upper", shift);
    if (st.ok()) st = SetLimit(id, disk_mb);
    if (!st.ok()) (void)DestroyLayerDir(id);
    return st;
  }

  Status DestroySnapshotDir(const std::string& id) override { return DestroySubvolume(snapshots_root(), id); }

  // A subvolume, so that sandboxes start from it with O(1) snapshots like from a captured one.
  Status CreateSnapshotDir(const std::string& id) override {
    UniqueFd parent = OpenDirNoFollow(snapshots_root());
    if (!parent) return SystemError("open " + snapshots_root(), errno);
    btrfs_ioctl_vol_args args{};
    std::strncpy(args.name, id.c_str(), BTRFS_PATH_NAME_MAX);
    if (::ioctl(parent.get(), BTRFS_IOC_SUBVOL_CREATE, &args) != 0) {
      return SystemError("create subvolume " + SnapshotPath(id), errno);
    }
    if (::chmod(SnapshotPath(id).c_str(), 0700) != 0) return SystemError("chmod " + SnapshotPath(id), errno);
    return {};
  }

  Status SealSnapshotDir(const std::string& id) override {
    UniqueFd dir = OpenDirNoFollow(SnapshotPath(id));
    if (!dir) return SystemError("open " + SnapshotPath(id), errno);
    uint64_t flags = BTRFS_SUBVOL_RDONLY;
    if (::ioctl(dir.get(), BTRFS_IOC_SUBVOL_SETFLAGS, &flags) != 0) {
      return SystemError("make " + SnapshotPath(id) + " read-only", errno);
    }
    return {};
  }

 private:
  static Status Snapshot(int source_fd, const std::string& parent_dir, const std::string& name, bool read_only) {
    UniqueFd parent = OpenDirNoFollow(parent_dir);
    if (!parent) return SystemError("open " + parent_dir, errno);
    btrfs_ioctl_vol_args_v2 args{};
    args.fd = source_fd;
    args.flags = read_only ? BTRFS_SUBVOL_RDONLY : 0;
    std::strncpy(args.name, name.c_str(), BTRFS_SUBVOL_NAME_MAX);
    if (::ioctl(parent.get(), BTRFS_IOC_SNAP_CREATE_V2, &args) != 0) {
      return SystemError("snapshot subvolume to " + parent_dir + "/" + name, errno);
    }
    return {};
  }

  // Removes the subvolume parent_dir/name (or a plain directory a half-made one left).
  Status DestroySubvolume(const std::string& parent_dir, const std::string& name) {
    std::string path = parent_dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return {};
      return SystemError("stat " + path, errno);
    }
    if (!S_ISDIR(st.st_mode) || st.st_ino != BTRFS_FIRST_FREE_OBJECTID) return RemoveTree(path);
    UniqueFd subvolume = OpenDirNoFollow(path);
    if (!subvolume) return SystemError("open " + path, errno);
    auto subvol = SubvolumeId(subvolume.get());
    subvolume.reset();
    UniqueFd parent = OpenDirNoFollow(parent_dir);
    if (!parent) return SystemError("open " + parent_dir, errno);
    // Deletes the whole subvolume at once (read-only ones too); the kernel frees its
    // extents in the background.
    btrfs_ioctl_vol_args args{};
    std::strncpy(args.name, name.c_str(), BTRFS_PATH_NAME_MAX);
    if (::ioctl(parent.get(), BTRFS_IOC_SNAP_DESTROY, &args) != 0 && errno != ENOENT) {
      return SystemError("delete subvolume " + path, errno);
    }
    if (subvol.ok()) {
      std::lock_guard lock(stale_mu_);
      stale_qgroups_.push_back(*subvol);
    }
    DropStaleQgroups(parent.get());
    return {};
  }

  // A deleted subvolume's qgroup can only go once the kernel's cleaner has freed the
  // subvolume and accounted the freed extents, so removals wait here and are retried on later
  // deletes instead of piling up as "<stale>" qgroups. Removing one whose numbers are not yet
  // zero would mark every qgroup inconsistent (see qgroup_watch.h). Kernels since 6.11 remove
  // the qgroup themselves; the removal here is then a no-op.
  //
  // One delete at a time looks, at most every kStaleScanInterval, and without holding the list:
  // with thousands deleted at once the list is long until the cleaner catches up, and a scan
  // of it on every delete (sysfs reads per entry, under the list's lock) made deleting N
  // sandboxes cost as N squared and serialized the deletes.
  static constexpr std::chrono::milliseconds kStaleScanInterval{250};
  void DropStaleQgroups(int fs_fd) {
    std::vector<uint64_t> pending;
    {
      std::lock_guard lock(stale_mu_);
      const auto now = std::chrono::steady_clock::now();
      if (stale_scanning_ || now < next_stale_scan_) return;
      stale_scanning_ = true;
      next_stale_scan_ = now + kStaleScanInterval;
      pending.swap(stale_qgroups_);
    }
    std::vector<uint64_t> still;
    for (uint64_t qgroup : pending) {
      std::optional<bool> settled = QgroupSettled(qgroup);
      if (!settled) continue;  // already gone
      if (!*settled) {
        still.push_back(qgroup);
        continue;
      }
      btrfs_ioctl_qgroup_create_args remove{};
      remove.create = 0;
      remove.qgroupid = qgroup;
      if (::ioctl(fs_fd, BTRFS_IOC_QGROUP_CREATE, &remove) != 0 && errno == EBUSY) still.push_back(qgroup);
    }
    std::lock_guard lock(stale_mu_);
    stale_qgroups_.insert(stale_qgroups_.begin(), still.begin(), still.end());
    stale_scanning_ = false;
  }

  // Whether qgroup 0/<id> counts nothing any more; nullopt if it no longer exists. Kernels
  // without qgroups in sysfs do not say: then it is tried (they lack the inconsistency rule).
  std::optional<bool> QgroupSettled(uint64_t id) const {
    std::string dir = qgroups_sysfs_ + "/0_" + std::to_string(id);
    if (::access(qgroups_sysfs_.c_str(), F_OK) != 0) return true;
    if (::access(dir.c_str(), F_OK) != 0) return std::nullopt;
    for (const char* figure : {"/referenced", "/exclusive"}) {
      auto text = ReadFile(dir + figure);
      if (!text.ok() || text->empty() || (*text)[0] != '0') return false;
    }
    return true;
  }

  std::mutex stale_mu_;  // guards the three below
  std::vector<uint64_t> stale_qgroups_;
  bool stale_scanning_ = false;
  std::chrono::steady_clock::time_point next_stale_scan_;

  UniqueFd OpenLayer(const std::string& id) const { return OpenDirNoFollow(LayerPath(id)); }

  Error LayerOpenError(const std::string& id) const {
    if (errno == ENOENT) return MakeError(ErrorCode::kNotFound, "no layer " + id);
    return SystemError("open " + LayerPath(id), errno);
  }

  static Result<uint64_t> SubvolumeId(int fd) {
    btrfs_ioctl_ino_lookup_args args{};
    args.treeid = 0;
    args.objectid = BTRFS_FIRST_FREE_OBJECTID;
    if (::ioctl(fd, BTRFS_IOC_INO_LOOKUP, &args) != 0) return SystemError("BTRFS_IOC_INO_LOOKUP", errno);
    return static_cast<uint64_t>(args.treeid);
  }

  std::string qgroups_sysfs_;
  QgroupWatch watch_;
};

std::string FormatUuid(const __u8* b) {
  char s[37];
  std::snprintf(s, sizeof s, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return s;
}

}  // namespace

Result<std::unique_ptr<LayerArea>> OpenBtrfsLayerArea(const std::string& mount_point) {
  UniqueFd mount_fd = OpenDirNoFollow(mount_point);
  if (!mount_fd) return SystemError("open " + mount_point, errno);
  btrfs_ioctl_quota_ctl_args quota{};
  quota.cmd = BTRFS_QUOTA_CTL_ENABLE;  // no-op when already enabled
  if (::ioctl(mount_fd.get(), BTRFS_IOC_QUOTA_CTL, &quota) != 0) {
    return SystemError("enable btrfs quota on " + mount_point, errno);
  }
  btrfs_ioctl_fs_info_args info{};
  if (::ioctl(mount_fd.get(), BTRFS_IOC_FS_INFO, &info) != 0) return SystemError("BTRFS_IOC_FS_INFO", errno);
  std::string sysfs = "/sys/fs/btrfs/" + FormatUuid(info.fsid) + "/qgroups";
  // Full accounting when a subvolume that shares tree blocks with a snapshot or fork is
  // dropped, whatever its tree height: over the threshold (3 on recent kernels) the kernel
  // gives up and marks every qgroup inconsistent instead. Kernels before 6.2 lack the knob.
  if (::access((sysfs + "/drop_subtree_threshold").c_str(), W_OK) == 0) {
    UniqueFd knob(::open((sysfs + "/drop_subtree_threshold").c_str(), O_WRONLY | O_CLOEXEC));
    if (!knob || ::write(knob.get(), "8", 1) != 1) {
      spdlog::warn("storage: could not raise btrfs drop_subtree_threshold: {}", std::strerror(errno));
    }
  }
  UniqueFd watch_fd(::fcntl(mount_fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!watch_fd) return SystemError("dup " + mount_point, errno);
  auto area = std::make_unique<BtrfsLayerArea>(mount_point, sysfs, std::move(watch_fd));
  BH_TRY(MakeDir(area->root(), 0700));
  // Qgroups of subvolumes deleted before a restart were only queued in memory: sweep them.
  // Best effort (btrfs-progs older than 6.1 lacks the command).
  if (std::string btrfs = FindProgram({"/usr/bin/btrfs", "/bin/btrfs", "/usr/sbin/btrfs", "/sbin/btrfs"});
      !btrfs.empty()) {
    (void)RunProgram({btrfs, "qgroup", "clear-stale", mount_point});
  }
  return std::unique_ptr<LayerArea>(std::move(area));
}

}  // namespace bulkhead::storage
