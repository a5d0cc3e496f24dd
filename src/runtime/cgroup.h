// Per-sandbox cgroups: memory (swap included), pids and cpu limits, usage, and teardown.
// cgroup v2 (unified) and v1 (one hierarchy per controller) behind one class.
//
// Init is kept out of its own sandbox's OOM kills by keeping it out of the memory cgroup the
// sandbox's commands share (a lower oom_score_adj for init would need CAP_SYS_RESOURCE, which
// hosts and containers often drop). Init moves each process it starts into the workload's group
// through the cgroup.procs descriptor the daemon opens for it.
//   v1  <memory>/<parent>/<group>  every process but init; the limit
//       <memory>/<parent>/.inits   the init of every sandbox that shares it (Open): one memory
//                                  cgroup for all, limited to kInitReserve per sandbox group
//       other hierarchies          init and every other process in <parent>/<group>
//   v2  <group>  the limit; +memory below it: <group>/init  init     <group>/workload  the
//       limit less kInitReserve (16 MiB, or a quarter of a smaller limit)
// Why v1 does not give each sandbox a group of init's own, as v2 must (one hierarchy: init
// cannot leave its sandbox's cpu and pids groups): the kernel keeps per-memory-cgroup state for
// every superblock on the host, which grows as memory cgroups x superblocks (bench/README.md,
// density). What v1 trades for that: init's memory is not charged to its sandbox; all inits
// share a budget, and an init far past its share (init bounds what it holds: output, sessions)
// is the one the OOM killer of .inits picks when it fills.
// The sandbox's cgroup namespace is rooted at <group> (it shows the limit at the top): init
// enters <group>, unshares the namespace, then moves into its own (v1: .inits in the memory
// hierarchy; v2: <group>/init, since v2 allows no process in a group that passes a controller
// down), and InitStarted turns the memory controller on below <group> (v2).
//
// TCP socket buffers count against the sandbox too. v2 charges them to memory.current (unless
// the kernel was booted with cgroup.memory=nosocket: Open warns). v1 charges them to a counter
// of their own, and only in a group whose memory.kmem.tcp.limit_in_bytes was written: the
// limit is a quarter of the memory limit, on top of it. Past the limit the kernel still lets
// each socket queue about one packet (up to 64 KiB on loopback: measured 50-60 KiB per
// connected pair of sockets), so the descriptors a command may hold are sized to keep that
// within the rest of the memory limit (runtime/usage.h DescriptorLimit). Not bounded by either:
// connections a listener has not accepted yet, whose buffers the kernel charges to nobody
// until accept().
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "runtime/tier.h"

namespace bulkhead::runtime {

class Cgroups {
 public:
  // Detects the cgroup version and prepares the parent group "bulkhead-<tag>" under which
  // every sandbox group of this daemon lives (tag keeps daemons with different state dirs
  // apart). `inits_apart`: the sandboxes' inits run on the host and are kept from their OOM
  // kills (native; OpenJoinFds gives their groups); otherwise the sandbox's whole tree joins
  // its group alone.
  static Result<Cgroups> Open(const std::string& tag, bool inits_apart);

  // What init's reserve keeps from the workload group: 16 MiB, or a quarter of a smaller limit.
  static constexpr int64_t kInitReserve = 16 << 20;

  bool v2() const { return v2_; }
  Status Create(const std::string& id, const Limits& limits);
  Status SetLimits(const std::string& id, const Limits& limits);
  // A sandbox booting for a warm pool yields the CPU to the sandboxes in use (the lowest CPU
  // weight: its boot runs on what they leave); handed out, it weighs as any other.
  Status SetBackground(const std::string& id, bool background);
  // cgroup.procs files, opened by the daemon (the kernel checks a move with the opener's
  // credentials and cgroup namespace), that a process writes "0" into to move itself.
  struct JoinFds {
    std::vector<UniqueFd> sandbox;  // the sandbox's group, one per hierarchy: init, first
    UniqueFd init;      // init's own, after it unshared its cgroup namespace (v1: .inits)
    UniqueFd workload;  // every other process of the sandbox (v1: the sandbox's memory group)
  };
  Result<JoinFds> OpenJoinFds(const std::string& id);
  // Once init left <group> for <group>/init (v2): the memory controller below <group> and the
  // workload group's limit. Nothing to do on v1.
  Status InitStarted(const std::string& id, const Limits& limits);
  Result<runtime::Usage> Usage(const std::string& id);
  // Out-of-memory handling by the daemon instead of the kernel's OOM killer (memory_watch.h):
  // answers the descriptor that becomes readable when the group runs out of memory (v1: an
  // eventfd on memory.oom_control, with the OOM killer off; v2: memory.events, EPOLLPRI, with
  // memory.high at `limit_bytes`).
  Result<UniqueFd> OomEvents(const std::string& id, int64_t limit_bytes);
  // Whether the group is out of memory now: v1 under_oom; v2 memory.current above memory.high.
  bool OutOfMemory(const std::string& id);
  // v1: the group's hard limit alone (a rescue grows it, then puts it back; kBusy-like
  // kUnavailable while the group holds more). The OOM killer on again: the last resort.
  Status SetMemoryBytes(const std::string& id, int64_t bytes);
  Status EnableOomKiller(const std::string& id);
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
  // v1 with inits apart: .inits's limit for the sandbox groups there are now.
  Status SizeInits(int change);

  bool v2_ = false;
  std::vector<std::string> parents_;  // v2: {"/sys/fs/cgroup/bulkhead-x"}; v1: one per controller
  bool inits_apart_ = false;
  std::string inits_;                 // v1: <memory>/<parent>/.inits, if inits are apart
  struct InitsCount {
    std::mutex mu;
    int64_t groups = 0;  // how many sandbox groups .inits is sized for
  };
  std::unique_ptr<InitsCount> inits_count_;
};

}  // namespace bulkhead::runtime
