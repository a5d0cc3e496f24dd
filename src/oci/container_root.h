// A container's filesystems, assembled in its new mount namespace by its first process while
// it is still host root: the bundle's rootfs (containerd's snapshot: an overlay, or a bind of
// one directory) rebuilt from idmapped clones of its layers so that the ids stored in them show
// as the same ids inside the container while its processes run as its host range; the spec's
// mounts, each resolved inside the new root (a symlink in the image cannot aim one at the
// host); /dev's devices; then pivot_root and the masked and read-only paths.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "oci/container_cgroup.h"
#include "oci/spec.h"

namespace bulkhead::oci {

struct RootPlan {
  std::string rootfs;   // the bundle's rootfs, absolute (containerd's mount of the snapshot)
  std::string scratch;  // an empty directory of the runtime's where the layers are attached
  int idmap_fd = -1;    // the container's user namespace: the layers' idmap
  uid_t host_uid = 0;   // its uid and gid 0 on the host
  const Spec* spec = nullptr;
  const ContainerCgroup* cgroup = nullptr;
  bool new_uts = false;  // the container has a uts namespace of its own (sethostname)
};

// Everything up to and including pivot_root, then the masks. Call in the new mount namespace,
// as host root acting as the container's root on files (ActAsContainerRootOnHost).
Status AssembleRoot(const RootPlan& plan);

// One overlay mount of the host's mount table: its layers as mountinfo names them.
struct OverlayLayers {
  std::vector<std::string> lower;
  std::string upper, work;
  std::vector<std::string> other_options;  // index=off, userxattr, ...
};
// The filesystem type mounted at `path` (the last mount there) and, for an overlay, its layers;
// "" when nothing is mounted there.
Result<std::string> MountedType(const std::string& mountinfo, const std::string& path, OverlayLayers* layers);

// Mount flags and data from an OCI mount's options ("ro", "nosuid", "mode=755", ...).
struct MountOptions {
  unsigned long flags = 0;
  unsigned long propagation = 0;  // MS_PRIVATE, MS_SLAVE, ... (with MS_REC when "r"-prefixed)
  bool recursive_bind = false;
  std::vector<std::string> data;  // what the filesystem takes
};
MountOptions ParseMountOptions(const std::vector<std::string>& options);
// uid=/gid= options given in the container's ids, as host ids (its range from host_uid);
// a mount made from the host would take them as host ids.
std::vector<std::string> ShiftIdOptions(const std::vector<std::string>& data, uid_t host_uid);

}  // namespace bulkhead::oci
