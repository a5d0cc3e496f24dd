// The mount steps that assemble a sandbox's root on a setup child's tmpfs, shared by the tiers
// that assemble it there (gvisor's launcher, the microvm tier's root virtiofsd): the image
// idmapped under the sandbox's writable layer, and the host image's directories.
#pragma once
#include <string>
#include <vector>

#include "runtime/mount_steps.h"
#include "runtime/tier.h"

namespace bulkhead::runtime {

// `tree` (an image's root) holds something at `dir`.
bool HasFilesAt(const std::string& tree, const std::string& dir);

// The image cloned idmapped (from the stored ids) and read-only at base/lower, under the
// writable layer in an overlay at base/root; the host image, for an image built on it,
// idmapped at base/hostimage. Answers base/root.
std::string PlanRootOverlay(const RootfsLayers& rootfs, const std::string& base, std::vector<MountStep>& steps);

// The host image's directory `dir` (its `index`-th): where the image (or the host image below
// it) holds files of its own there too, an overlay of them over the host's at base/host<index>;
// else the host's directory itself.
// Answers what to bind read-only at `dir`. (PlanRootOverlay's steps come first.)
std::string PlanHostDir(const RootfsLayers& rootfs, const std::string& dir, size_t index, const std::string& base,
                        std::vector<MountStep>& steps);

}  // namespace bulkhead::runtime
