// The launcher: the child that starts runsc for one sandbox. It makes a private mount
// namespace (nothing it mounts shows on the host, and all of it goes with the sandbox's last
// process) and a fresh network namespace with loopback up (runsc runs with --network=host in
// it), assembles the sandbox's filesystems on a tmpfs at kMountPoint, where runsc's gofer can
// reach them (it runs as the sandbox's unprivileged host uid, and the state dir is root's
// alone), joins the sandbox's cgroups and execs `runsc run --detach`. Like the native tier's
// first process it shares the daemon's memory until that exec: everything is prepared in a
// LaunchPlan, and it makes raw syscalls only (runtime/child_syscalls.h).
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/mount_steps.h"

namespace bulkhead::runtime::gvisor {

// An empty host directory (made by the tier) that each launcher mounts its own tmpfs over.
inline constexpr char kMountPoint[] = "/run/bulkhead-gvisor";

using runtime::MountStep;

// The empty file that keeps /tmp from being empty (LaunchPlan::root).
inline constexpr char kTmpKeeper[] = "tmp/.bulkhead-keep";

struct LaunchPlan {
  std::string tmpfs_options;       // the tmpfs at kMountPoint
  std::vector<MountStep> steps;
  // The root filesystem once the steps made it: each top-level name a mount goes below must
  // be a real directory or absent (child::RealDirOrAbsent), and /tmp is made there if absent,
  // owned by the sandbox's root, and never empty (kTmpKeeper): runsc puts a tmpfs of its own
  // over a missing or empty /tmp, and what the sandbox keeps there would then leave its
  // writable layer (gone after a stop, missing from snapshots and forks). A bind of the layer's
  // /tmp instead would make it a mount of its own: rename(2) between /tmp and the rest would
  // fail with EXDEV.
  std::string root;
  std::vector<std::string> top_level_names;
  uid_t root_owner = 0;
  // Each volume's mount point, made or entered as the native tier does (runsc mounts the volume
  // there): below the root, made where missing; below a host directory, which is read-only,
  // only entered.
  struct MountPoint {
    std::string base;
    std::vector<std::string> components;
    bool create = true;
  };
  std::vector<MountPoint> volume_points;
  int stored_ids_fd = -1;          // user namespace mapping kStoredIdBase -> the sandbox's range
  std::vector<int> cgroup_join_fds;  // the sandbox's cgroup.procs, one per hierarchy
  int log_fd = -1;                 // runsc's (and the sandbox's init's) stdout and stderr
  std::vector<char*> argv;         // runsc's, null-terminated
  std::vector<char*> envp;         // null-terminated
  // Filled by the child when a step fails (the memory is shared with the parent).
  const char* failed_step = nullptr;
  int failed_errno = 0;
  int failed_volume = -1;  // index into volume_points when a volume step failed
};

// Runs in the cloned child. Returns only on failure (then the child exits).
int LaunchMain(void* plan);

}  // namespace bulkhead::runtime::gvisor
