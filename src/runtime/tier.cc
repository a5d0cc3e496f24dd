#include "runtime/tier.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "runtime/child_syscalls.h"

namespace bulkhead::runtime {

ctl::LimitsMessage LimitsInside(const Limits& limits) {
  return {static_cast<int>(limits.pids), limits.memory_mb << 20, limits.cpus};
}

Status Tier::Checkpoint(const std::string& /*id*/, const SandboxHandle& /*handle*/, const std::string& /*image_dir*/) {
  return MakeError(ErrorCode::kInvalid, "the " + name() + " runtime takes no memory snapshots", "runtime_unsupported");
}

Error UnbootableFiles() {
  return MakeError(ErrorCode::kConflict,
                   "the sandbox's files cannot boot: a mount point in the sandbox root is not a directory (a symlink?)",
                   "sandbox_files_unbootable");
}

Error VolumeMountPointError(const VolumeBind& volume, const char* failed_step, int error) {
  if (std::strcmp(failed_step, child::kVolumeMountPointStep) == 0) {
    return MakeError(ErrorCode::kInvalid, "volume path " + volume.target +
                                              " cannot be a mount point in this sandbox (a symlink, a file or a "
                                              "read-only directory is in the way): " +
                                              std::strerror(error));
  }
  return SystemError("attaching volume at " + volume.target + " failed at " + failed_step, error);
}

std::vector<std::string> WithEntriesOf(std::vector<std::string> names, const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

}  // namespace bulkhead::runtime
