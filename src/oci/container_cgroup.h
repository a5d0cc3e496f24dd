// A container's cgroup where its spec puts it (linux.cgroupsPath, e.g. the kubelet's
// "/kubepods/besteffort/pod<uid>/<id>" under the pod's group, or systemd's
// "slice:prefix:name" form), on cgroup v2 or in each v1 hierarchy: made, limited, joined,
// frozen, listed, removed. Written directly (as runc's cgroupfs driver does), never through
// systemd.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "oci/spec.h"

namespace bulkhead::oci {

// The pids limit a container gets when its spec sets none: a fork bomb stops there, not at
// the node's limit.
constexpr int64_t kDefaultPidsLimit = 4096;

class ContainerCgroup {
 public:
  // The group's directory in each hierarchy; `path` as the spec names it (empty: /bulkhead-oci/<id>).
  static Result<ContainerCgroup> Resolve(const std::string& path, const std::string& id, bool systemd_form);
  // From the directories Dirs() answered (the container's state).
  static ContainerCgroup FromDirs(std::vector<std::string> dirs, bool v2);

  // Makes the group with the spec's limits (pids: kDefaultPidsLimit unless it sets one).
  Status Create(const Resources& resources) const;
  // The limits `resources` sets, the others left as they are (`update`).
  Status Apply(const Resources& resources) const;
  Status Join(pid_t pid) const;  // 0: the calling process
  Status SetFrozen(bool frozen) const;
  bool Frozen() const;
  std::vector<pid_t> Pids() const;
  // Kills what is left (thawed first), then removes the group; waits up to ~2 s for it to empty.
  Status Remove() const;

  const std::vector<std::string>& Dirs() const { return dirs_; }
  bool v2() const { return v2_; }

 private:
  std::vector<std::string> dirs_;  // v2: one; v1: one per hierarchy
  bool v2_ = false;
};

// systemd's "system.slice:docker:abc" as a path: /system.slice/docker-abc.scope, each slice
// nested in its dash-separated parents ("a-b.slice" in "a.slice").
Result<std::string> SystemdCgroupPath(const std::string& spec_path);

}  // namespace bulkhead::oci
