// The containment steps, in order, that turn a freshly cloned child into a sandbox's init.
// Everything the child needs is prepared by the daemon beforehand in a ChildPlan: the child
// shares the daemon's memory (CLONE_VM|CLONE_VFORK) and must not allocate or take locks.
#pragma once
#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace bulkhead::runtime::native {

// A volume to attach: its host directory, and the path inside the root split into
// components, so the child can walk it one directory at a time without following symlinks.
struct VolumePlan {
  std::string source;
  std::vector<std::string> components;  // "/data/cache" -> {"data", "cache"}
  bool read_only = false;
};

struct ChildPlan {
  // Filesystem
  std::string image;             // image rootfs on the host (idmapped from the stored ids, read-only lower layer)
  std::string lower;             // empty dir where the idmapped image is attached
  std::string root;              // empty dir where the overlay (the sandbox's /) is mounted
  // "lowerdir=/proc/self/fd/<lower_fd>,upperdir=/proc/self/fd/..,workdir=..": layers named by
  // descriptor, so the sandbox's mountinfo shows no host path of the state dir.
  // The child opens the layers itself: a descriptor opened before the clone names a mount of
  // the daemon's namespace, which overlayfs refuses.
  std::string overlay_options;
  std::string upper, work;       // the writable layer's dirs on the host
  int layer_fds[3] = {-1, -1, -1};  // reserved descriptor numbers for lower, upper, work
  // An image built on the host image: the host image's root, idmapped like `image` at
  // `host_image_lower` and opened at the reserved `host_image_fd`; host_bind_overlays name it.
  std::string host_image, host_image_lower;
  int host_image_fd = -1;
  std::vector<std::string> host_binds;         // host dirs, e.g. "/usr": not idmapped, host root is nobody
  std::vector<std::string> host_bind_targets;  // root + dir
  // Per host bind: overlay options that show the image's own files there over the host dir
  // (read-only, no upper layer), or empty for a plain bind.
  std::vector<std::string> host_bind_overlays;
  std::vector<std::string> root_paths;         // root + "/proc", "/dev", ... (see contain.cc)
  std::vector<std::string> top_level_names;    // "usr", "proc", ...: what the mounts go below
  std::string devpts_options;
  // The tmpfs the child mounts at `scratch` (an empty dir; scratch_options) for what the
  // sandbox is shown from it: /dev with /dev/shm (scratch_dev), this boot's id ("8-4-4-4-12\n",
  // at /proc/sys/kernel/random/boot_id) from boot_id_file, the empty read-only dir that masks
  // /proc and /sys dirs (scratch_empty) and, on cgroup v1, the dir holding the controllers'
  // mount points (scratch_cgroup). One superblock for all of them: the kernel keeps, for each
  // memory cgroup, a slot per superblock (its shrinker), so superblocks made per sandbox cost
  // as the square of the sandbox count.
  std::string scratch, scratch_options, scratch_dev, boot_id, boot_id_file, scratch_empty, scratch_cgroup;
  std::vector<VolumePlan> volumes;
  uid_t root_owner = 0;          // host uid of the sandbox's root: owns mount points made for volumes
  // Identity
  int userns_fd = -1;            // the sandbox's user namespace (maps 0 -> host_uid)
  int stored_ids_fd = -1;        // a user namespace that maps kStoredIdBase -> host_uid: the
                                 // idmap of the image and volume mounts (common/id_ranges.h)
  std::vector<int> cgroup_join_fds;  // Cgroups::JoinFds
  int cgroup_init_fd = -1;           // init's own, joined after the unshare (cgroup.h)
  // What init gets
  int listen_fd = -1;            // becomes fd 3 (ctl::kListenFd)
  int workload_cgroup_fd = -1;   // becomes fd 4 (ctl::kWorkloadCgroupFd)
  int init_memfd = -1;           // sealed copy of bulkhead-init
  int sysfs_fd = -1;             // the tier's sysfs, a detached mount cloned to /sys; -1: mount one
  sock_fprog seccomp{};
  int64_t pids = 512;
  bool v2_cgroups = false;
  // cgroup v1: the sandbox's own group in each hierarchy, shown read-only at
  // /sys/fs/cgroup/<controller> so runtimes (JVM, Go, Node) can size themselves to its limits.
  std::vector<std::string> cgroup_v1_sources, cgroup_v1_targets;
  // Filled by the child when a step fails (the memory is shared with the parent).
  const char* failed_step = nullptr;
  int failed_errno = 0;
  int failed_volume = -1;  // index into volumes when a volume step failed
};


// Runs in the cloned child. Returns only on failure (then the child exits).
int ChildMain(void* plan);

// Paths inside the root that ChildMain mounts over; the daemon resolves them up front.
std::vector<std::string> RootPaths(const std::string& root);
// The top-level names of the root that the mounts go below (host binds, /proc, /dev, /sys),
// once all the plan's targets are set.
std::vector<std::string> TopLevelNames(const ChildPlan& plan);

}  // namespace bulkhead::runtime::native
