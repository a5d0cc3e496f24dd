#include "runtime/root_plan.h"

#include <filesystem>

namespace bulkhead::runtime {

bool HasFilesAt(const std::string& tree, const std::string& dir) {
  std::error_code ec;
  return !std::filesystem::is_empty(tree + dir, ec) && !ec;
}

std::string PlanRootOverlay(const RootfsLayers& rootfs, const std::string& base, std::vector<MountStep>& steps) {
  const std::string lower = base + "/lower", root = base + "/root";
  steps.push_back({MountStep::kDir, "", lower});
  steps.push_back({MountStep::kClone, rootfs.image, lower, "", false, true});
  if (!rootfs.host_image.empty()) {
    steps.push_back({MountStep::kDir, "", base + "/hostimage"});
    steps.push_back({MountStep::kClone, rootfs.host_image, base + "/hostimage", "", false, true});
  }
  steps.push_back({MountStep::kDir, "", root});
  steps.push_back({MountStep::kOverlay, "", root,
                   "lowerdir=" + lower + ",upperdir=" + rootfs.upper + ",workdir=" + rootfs.work, true});
  return root;
}

std::string PlanHostDir(const RootfsLayers& rootfs, const std::string& dir, size_t index, const std::string& base,
                        std::vector<MountStep>& steps) {
  std::string lowers;
  if (HasFilesAt(rootfs.image, dir)) lowers += base + "/lower" + dir + ":";
  if (!rootfs.host_image.empty() && HasFilesAt(rootfs.host_image, dir)) lowers += base + "/hostimage" + dir + ":";
  if (lowers.empty()) return dir;
  const std::string merged = base + "/host" + std::to_string(index);
  steps.push_back({MountStep::kDir, "", merged});
  steps.push_back({MountStep::kOverlay, "", merged, "lowerdir=" + lowers + dir});
  return merged;
}

}  // namespace bulkhead::runtime
