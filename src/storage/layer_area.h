// Where writable layers live and how their disk use is capped. One implementation per
// filesystem: XFS project quotas, btrfs qgroups, or plain directories without a cap.
// Internal to storage/.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

// Layer ids of named volumes start with this (a sandbox id never holds a '-').
inline constexpr char kVolumeLayerPrefix[] = "vol-";

class LayerArea {
 public:
  explicit LayerArea(std::string root) : root_(std::move(root)) {}
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

 private:
  std::string root_;
};

// Mounts (or finds already mounted) <state>/storage.img at <state>/storage and returns the
// area for it; falls back to plain <state>/layers with a warning when quotas cannot be had.
Result<std::unique_ptr<LayerArea>> OpenLayerArea(const std::string& state_dir, int64_t size_gb);

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
