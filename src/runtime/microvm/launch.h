// The helper: the child that starts one of a guest's host processes (QEMU, a virtiofsd, the
// vsock device). It joins the sandbox's cgroups; for a virtiofsd, assembles what it serves in
// a private mount namespace on a tmpfs at kMountPoint (the root: the image idmapped under the
// writable layer, with the host image's directories bound read-only and each volume's mount
// point made; a volume: its directory idmapped), so that nothing of it shows on the host; for
// QEMU, enters an empty network namespace of its own. It then becomes the sandbox's
// unprivileged host uid (as root of the sandbox's user namespace, or by setresuid) and execs.
// Like the other tiers' first children it shares the daemon's memory until that exec:
// everything is prepared in a HelperPlan, and it makes raw syscalls only.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/mount_steps.h"

namespace bulkhead::runtime::microvm {

// An empty host directory (made by the tier) that each virtiofsd helper mounts its tmpfs over.
inline constexpr char kMountPoint[] = "/run/bulkhead-microvm";
// The guest's tap as QEMU gets it (HelperPlan::tap): `-netdev tap,fd=3`.
inline constexpr int kTapFd = 3;
// A restored copy's saved state as QEMU gets it (HelperPlan::incoming): `-incoming fd:4`.
inline constexpr int kIncomingFd = 4;
// A restored copy's guest memory as QEMU gets it (HelperPlan::memory_copy): a memfd.
inline constexpr int kMemoryFd = 5;

struct HelperPlan {
  std::vector<int> cgroup_join_fds;  // the sandbox's cgroup.procs, one per hierarchy
  // A private mount namespace with a tmpfs (these options) at kMountPoint, and these steps.
  bool private_mounts = false;
  std::string tmpfs_options;
  std::vector<MountStep> steps;
  int stored_ids_fd = -1;  // user namespace mapping kStoredIdBase -> the sandbox's range
  // After the steps: each top-level name below `root` a mount goes under must be a real
  // directory or absent (child::RealDirOrAbsent).
  std::string root;
  std::vector<std::string> top_level_names;
  uid_t root_owner = 0;  // owns what the binds' mount points need made
  // Then, in order: `source` cloned read-only (recursively) onto root + components, the
  // directories made where missing if `create`; a bind without a source only makes (or
  // enters) its mount point: a volume's, which the guest mounts there (`volume` its index).
  struct Bind {
    std::string source;
    std::vector<std::string> components;
    bool create = true;
    int volume = -1;
  };
  std::vector<Bind> binds;
  bool new_netns = false;  // an empty network namespace of its own (not even loopback up)
  // With new_netns: a tap there (guest_link::kTapName), its descriptor kTapFd in what runs.
  bool tap = false;
  // A file opened (before the helper drops privileges) as kIncomingFd in what runs.
  std::string incoming;
  // A file copied (its data; holes stay holes) into a memfd made once the helper joined the
  // sandbox's cgroups (so its pages count there), as kMemoryFd in what runs.
  std::string memory_copy;
  // Whom it runs as: root of this user namespace (the sandbox's), or else `run_uid` (and gid)
  // unless 0 (QEMU, which drops to it itself with -runas once it opened /dev/kvm).
  int userns_fd = -1;
  uid_t run_uid = 0;
  int log_fd = -1;          // stdout and stderr
  std::vector<char*> argv;  // null-terminated
  std::vector<char*> envp;  // null-terminated
  // Filled by the child when a step fails (the memory is shared with the parent).
  const char* failed_step = nullptr;
  int failed_errno = 0;
  int failed_volume = -1;
};

// Runs in the cloned child. Returns only on failure (then the child exits).
int HelperMain(void* plan);

}  // namespace bulkhead::runtime::microvm
