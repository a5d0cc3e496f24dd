// What bulkhead-oci keeps of a container between its commands: <root>/<id>/state.json (the
// root is the caller's --root: containerd's /run/containerd/runc/<namespace>), 0700 root's,
// beside the exec fifo that holds a created container until `start`.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "oci/container_cgroup.h"
#include "runtime/tier.h"

namespace bulkhead::oci {

struct ContainerState {
  std::string id, bundle, rootfs;
  std::string created;       // RFC 3339
  pid_t pid = 0;             // the container's first process, on the host
  uint64_t start_time = 0;   // its /proc/<pid>/stat start time: guards against pid reuse
  uid_t host_uid = 0;        // the container's uid 0 on the host (its pod's range)
  std::string pod;           // the key of that range: the CRI pod's sandbox id, or the container's own
  std::vector<std::string> cgroup_dirs;
  bool cgroup_v2 = false;
  std::map<std::string, std::string> annotations;
  // The pod's egress helper (oci/pod_egress.h), kept by its sandbox container; pid 0: none.
  runtime::SandboxHandle egress_helper;

  ContainerCgroup Cgroup() const { return ContainerCgroup::FromDirs(cgroup_dirs, cgroup_v2); }
};

// A container id as runc accepts it: letters, digits, '_', '-', '.', not starting with '.'.
Status CheckId(const std::string& id);
std::string StateDir(const std::string& root, const std::string& id);
std::string ExecFifo(const std::string& root, const std::string& id);
Result<ContainerState> LoadState(const std::string& root, const std::string& id);
Status SaveState(const std::string& root, const ContainerState& state);

// "created" (waiting for start), "running", "paused" or "stopped".
std::string CurrentStatus(const std::string& root, const ContainerState& state);
// Whether the container's first process still runs (not exited, not a zombie, not a reused pid).
bool Alive(const ContainerState& state);

// An exclusive lock on the state root, held while a command reads and changes what it keeps.
Result<UniqueFd> LockRoot(const std::string& root);

}  // namespace bulkhead::oci
