#include "runtime/root_plan.h"

#include <filesystem>

namespace bulkhead::runtime {

std::string PlanRootOverlay(const RootfsLayers& rootfs, const std::string& base, std::vector<MountStep>& steps) {
  const std::string lower = base + "/lower", root = base + "/root";
  steps.push_back({MountStep::kDir, "", lower});
  steps.push_back({MountStep::kClone, rootfs.image, lower, "", false, true});
  steps.push_back({MountStep::kDir, "", root});
  steps.push_back({MountStep::kOverlay, "", root,
                   "lowerdir=" + lower + ",upperdir=" + rootfs.upper + ",workdir=" + rootfs.work, true});
  return root;
}

std::string PlanHostDir(const RootfsLayers& rootfs, const std::string& dir, size_t index, const std::string& base,
                        std::vector<MountStep>& steps) {
  std::error_code ec;
  if (std::filesystem::is_empty(rootfs.image + dir, ec) || ec) return dir;
  const std::string merged = base + "/host" + std::to_string(index);
  steps.push_back({MountStep::kDir, "", merged});
  steps.push_back({MountStep::kOverlay, "", merged, "lowerdir=" + base + "/lower" + dir + ":" + dir});
  return merged;
}

}  // namespace bulkhead::runtime
