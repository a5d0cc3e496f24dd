// Per-sandbox cgroups: memory (swap included), pids and cpu limits, usage, and teardown.
// cgroup v2 (unified) and v1 (one hierarchy per controller) behind one class.
#pragma once
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "core/types.h"
#include "runtime/runtime.h"

namespace bulkhead::runtime::native {

class Cgroups {
 public:
  // Detects the cgroup version and prepares the parent group "bulkhead-<tag>" under which
  // every sandbox group of this daemon lives (tag keeps daemons with different state dirs apart).
  static Result<Cgroups> Open(const std::string& tag);

  bool v2() const { return v2_; }
  Status Create(const std::string& id, const Limits& limits);
  Status SetLimits(const std::string& id, const Limits& limits);
  // Opens the files a process writes "0" into to join the sandbox's groups (one per hierarchy).
  Result<std::vector<UniqueFd>> OpenJoinFds(const std::string& id);
  Result<core::SandboxUsage> Usage(const std::string& id);
  // Freezes (or thaws) every process of the sandbox: the v1 freezer or v2's cgroup.freeze.
  // Returns once the kernel reports the group frozen (a few ms; kUnavailable after ~5 s).
  Status SetFrozen(const std::string& id, bool frozen);
  bool Frozen(const std::string& id) const;
  // Kills whatever is left in the groups (thawing them first) and removes them; waits up to
  // ~2 s for them to empty.
  Status Destroy(const std::string& id);
  std::vector<std::string> List();
  // Renames the sandbox's groups in every hierarchy where `from` exists.
  Status Rename(const std::string& from, const std::string& to);
  // Removes this daemon's parent groups if no sandbox group is left in them.
  void RemoveParentsIfEmpty();
  // Paths of the sandbox's group in each hierarchy (for tests and diagnostics).
  std::vector<std::string> Paths(const std::string& id) const;

 private:
  bool v2_ = false;
  std::vector<std::string> parents_;  // v2: {"/sys/fs/cgroup/bulkhead-x"}; v1: one per controller
};

}  // namespace bulkhead::runtime::native
