// Where writable layers live and how their disk use is capped. One implementation per
// filesystem: XFS project quotas, btrfs qgroups, or plain directories without a cap.
// Internal to storage/.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "storage/tree_copy.h"

namespace bulkhead::storage {

// Layer ids of named volumes start with this (a sandbox id never holds a '-').
inline constexpr char kVolumeLayerPrefix[] = "vol-";

class LayerArea {
 public:
  // Snapshots go beside root on the same filesystem: <root>/../snapshots.
  explicit LayerArea(std::string root)
      : root_(std::move(root)), snapshots_root_(root_.substr(0, root_.find_last_of('/')) + "/snapshots") {}
  virtual ~LayerArea() = default;
  LayerArea(const LayerArea&) = delete;
  LayerArea& operator=(const LayerArea&) = delete;

  // The directory that holds one <id>/ directory per layer.
  const std::string& root() const { return root_; }
  std::string LayerPath(const std::string& id) const { return root_ + "/" + id; }

  virtual std::string backend() const = 0;  // "xfs-prjquota" | "btrfs-qgroup" | "none"
  virtual bool enforced() const = 0;
  // Makes root()/<id> as an empty directory whose contents count against a disk_mb cap.
  virtual Status CreateLayerDir(const std::string& id, int64_t disk_mb) = 0;
  virtual Status SetLimit(const std::string& id, int64_t disk_mb) = 0;
  virtual Result<int64_t> UsageBytes(const std::string& id) const = 0;
  // Removes root()/<id> and everything in it; a missing one is success.
  virtual Status DestroyLayerDir(const std::string& id) = 0;

  // Snapshots and forks. The defaults copy files (the "overlay" driver: reflinks where the
  // filesystem shares extents); btrfs overrides them with subvolume snapshots.
  virtual std::string driver() const { return "overlay"; }
  const std::string& snapshots_root() const { return snapshots_root_; }
  std::string SnapshotPath(const std::string& id) const { return snapshots_root_ + "/" + id; }
  // Captures root()/<layer_id>/upper as SnapshotPath(snapshot_id)/upper. The caller keeps
  // the layer still meanwhile.
  virtual Status CaptureSnapshot(const std::string& layer_id, const std::string& snapshot_id);
  // Makes root()/<id> (capped at disk_mb) holding upper/, a copy of source_dir/upper with
  // its owners moved by `shift`. source_dir is a snapshot's directory or another layer's.
  virtual Status CreateLayerFrom(const std::string& id, const std::string& source_dir, int64_t disk_mb,
                                 const IdShift& shift);
  // Removes SnapshotPath(id); a missing one is success.
  virtual Status DestroySnapshotDir(const std::string& id);
  // An empty SnapshotPath(id) for an imported snapshot to be unpacked into, and, once it is
  // complete, made immutable (btrfs: a subvolume, then read-only).
  virtual Status CreateSnapshotDir(const std::string& id);
  virtual Status SealSnapshotDir(const std::string&) { return {}; }

 private:
  std::string root_;
  std::string snapshots_root_;
};

// Mounts (or finds already mounted) <state>/storage.img at <state>/storage and returns the
// area for it. driver "" = what the machine gives (xfs, else btrfs, else plain <state>/layers
// with a warning); "overlay" = xfs or plain, never btrfs; "btrfs" = a btrfs image or an error.
// An existing image of the other kind than `driver` asks for is refused (kInvalid).
Result<std::unique_ptr<LayerArea>> OpenLayerArea(const std::string& state_dir, int64_t size_gb,
                                                 const std::string& driver = "");

// The implementations, made by OpenLayerArea. mount_point holds the filesystem root.
Result<std::unique_ptr<LayerArea>> OpenXfsLayerArea(const std::string& mount_point,
                                                    const std::string& block_device);
Result<std::unique_ptr<LayerArea>> OpenBtrfsLayerArea(const std::string& mount_point);
Result<std::unique_ptr<LayerArea>> OpenPlainLayerArea(const std::string& root);

// Inodes allowed per layer where the filesystem counts them apart from blocks (XFS).
inline uint64_t InodeLimitFor(int64_t disk_mb) {
  uint64_t by_size = static_cast<uint64_t>(disk_mb) * 256;  // one per 4 KiB of quota
  return by_size < 65536 ? 65536 : by_size;
}

}  // namespace bulkhead::storage
