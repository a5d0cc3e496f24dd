// The gvisor isolation tier: each sandbox runs under runsc, gVisor's user-space kernel, with
// bulkhead's init as its only container process. The sandbox's code talks to gVisor's
// Sentry, never to the host kernel; the Sentry and its gofer run as the sandbox's own
// unprivileged host uid range, under seccomp filters of gVisor's, in the sandbox's cgroups.
//
// Files: the root filesystem is an overlay of the image (idmapped from the stored ids) under
// the sandbox's writable layer, assembled by the launcher (launch.h) and served by runsc's
// gofer with directfs, writes going straight to the layer (so snapshots, forks and the disk
// quota work as on native). Init finds its binary and seccomp filter in the sandbox's control
// directory, where the daemon listens for it (runtime/init_listener.h): init dials the daemon
// (--host-uds=open, which gVisor's checkpoint can save, unlike a socket bound in the sandbox)
// and hides the directory (init/self_contain.h).
//
// Network: runsc runs with --network=host in a fresh network namespace per sandbox. The
// sandbox's sockets are then host sockets the Sentry makes in that namespace, so the
// namespace is shaped exactly as the native tier's (net/netns.h: loopback only, or the
// egress proxy's redirect rules and the open-mode link), with the same guarantees, the same
// egress log, live policy changes, and its loopback reachable for the port proxy. gVisor's own
// netstack would keep TCP/IP parsing out of the host kernel, but it takes its interfaces once
// at boot (so none <-> allowlist could not change live, and mode none would need no interface
// at all), needs a gateway namespace per sandbox and hides the sandbox's loopback from the
// port proxy. What the Sentry may do with host sockets is narrow: TCP, UDP and ICMP sockets
// with an allow-list of options, no raw or packet sockets, no netlink writes.
//
// Limits: the host cgroups bound the Sentry, its gofer and the memory they hold for the
// sandbox (above the sandbox's limits by gVisor's own costs: HostLimits); init enforces the
// pids limit in gVisor's own pids cgroup, exactly, and the memory limit by killing the largest
// process when the sandbox is over it, as the kernel would (ctl::kLimits, init/memory_guard.h).
// Should the host's group fill anyway, the host's OOM killer would pick the Sentry or a stub
// and end the whole sandbox: it is kept away, and init is asked to kill the sandbox's largest
// process instead (runtime/memory_watch.h).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cgroup.h"
#include "runtime/gvisor/runsc.h"
#include "runtime/init_listener.h"
#include "runtime/memory_watch.h"
#include "runtime/tier.h"

namespace bulkhead::runtime::gvisor {

class GvisorTier : public Tier {
 public:
  // `tag` names this daemon's cgroup parent; `state_dir` is the daemon's (the tier keeps its
  // copy of init and the seccomp filter in <state>/gvisor, and runsc's sidecar binaries in
  // <state>/gvisor/runsc-sidecars); `runsc` from FindRunsc. Without `prewarmer_binary`
  // (bulkhead-sentry-prewarmer) sandboxes still start, more slowly.
  static Result<std::unique_ptr<GvisorTier>> Create(const std::string& tag, const std::string& state_dir,
                                                    const std::string& init_binary,
                                                    const std::string& prewarmer_binary, Runsc runsc);

  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override;
  std::vector<std::pair<std::string, std::string>> Details() const override;
  // Every task costs the host kTaskHostBytes beyond what it allocates (its stub process and the
  // Sentry's state for it): the host's limit has room for them (HostLimits), and the pids limit
  // inside is at most what the sandbox's memory would carry, so that room stays within its size.
  ctl::LimitsMessage LimitsInsideFor(const Limits& limits) const override { return InsideLimits(limits); }
  static ctl::LimitsMessage InsideLimits(const Limits& limits);
  static constexpr int64_t kTaskHostBytes = 3 << 20;  // measured ~0.6 (exec'd) to 2.8 (forked python)
  Result<SandboxHandle> Launch(const LaunchSpec& spec) override;
  // runsc checkpoint --leave-running: the Sentry stops every task, writes its kernel's state
  // and the sandbox's memory, and lets them go on (a paused sandbox stays paused). A restore
  // (runsc restore) reopens the files by path in the new sandbox's mounts, which the launcher
  // puts at the same paths, and its host sockets in the new network namespace: listening ones
  // listen again, connections out are cut, and so are init's dialed connections to the daemon,
  // which init dials again.
  Status Checkpoint(const std::string& id, const SandboxHandle& handle, const std::string& image_dir) override;
  std::string MemoryFormat() const override { return "gvisor " + runsc_.version; }
  std::shared_ptr<const InitDialer> Dialer(const std::string& staging) const override;
  Result<NetworkAttachment> AttachNetwork(const SandboxHandle& handle) override;
  Status SetLimits(const std::string& id, const Limits& limits) override;
  Status Foreground(const std::string& id) override { return cgroups_.SetBackground(id, false); }
  Result<Usage> SandboxUsage(const std::string& id) override { return cgroups_.Usage(id); }
  // Through runsc (pause and resume): gVisor's kernel stops and starts its tasks itself. The
  // host's cgroup freezer must not be used: it stops the Sentry's stub processes wherever they
  // are, and the tasks they run fault (SIGSEGV) once thawed.
  Status SetFrozen(const std::string& id, bool frozen) override;
  bool Frozen(const std::string& id) override;
  bool Alive(const SandboxHandle& handle) override;
  Status Destroy(const std::string& id, const SandboxHandle& handle) override;
  std::vector<std::string> Leftovers() override;
  Status Reattach(const std::string& id, const SandboxHandle& handle, const Limits& limits,
                  const std::string& staging) override;
  void SetReclaim(std::function<bool(const std::string& id)> reclaim) override {
    memory_watch_.SetReclaim(std::move(reclaim));
  }
  Status Rename(const std::string& from, const std::string& to) override { return cgroups_.Rename(from, to); }
  void Release() override;

  // The host cgroup limits of a sandbox with these limits: its own, plus what the Sentry and
  // its gofer need beside it (memory), and their host threads (pids: the sandbox's own count is
  // enforced inside, by init).
  static Limits HostLimits(const Limits& sandbox);

 private:
  GvisorTier(Cgroups cgroups, std::string dir, std::string runsc_root, std::string sidecar_dir, Runsc runsc)
      : cgroups_(std::move(cgroups)),
        dir_(std::move(dir)),
        runsc_root_(std::move(runsc_root)),
        sidecar_dir_(std::move(sidecar_dir)),
        runsc_(std::move(runsc)) {}

  // The daemon's socket for the init of the sandbox launched with this staging directory, made
  // by Launch before runsc starts and handed over by Dialer.
  mutable std::mutex listeners_mu_;
  mutable std::map<std::string, std::shared_ptr<InitListener>> launched_listeners_;

  // runsc's state of the sandbox (its --root): one directory per sandbox, as short a path as
  // its control socket there needs.
  std::string RunscRoot(const std::string& id) const { return runsc_root_ + "/" + id; }
  // runsc's word for the sandbox's state ("running", "paused", ...), or "" if it has none.
  std::string RunscStatus(const std::string& id) const;

  const std::string name_ = "gvisor";
  Cgroups cgroups_;
  MemoryWatch memory_watch_{cgroups_};  // the host's OOM killer would end the whole sandbox
  std::string dir_;  // <state>/gvisor: init's binary and the seccomp filter, linked into each sandbox
  std::string runsc_root_;  // /run/bulkhead/gvisor-<tag>
  std::string sidecar_dir_;  // runsc's GVISOR_SIDECAR_BINARIES_DIR, or "" (MakeSidecarDir)
  Runsc runsc_;
};

}  // namespace bulkhead::runtime::gvisor
