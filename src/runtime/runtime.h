// The isolation tiers behind one interface. A Runtime starts a sandbox's init with its
// filesystem, namespaces and limits in place, and tears everything down again.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/types.h"

namespace bulkhead::runtime {

struct Limits {
  double cpus = 1.0;
  int64_t memory_mb = 1024;
  int64_t pids = 512;
};

// A named volume's directory on the host, bound into the sandbox idmapped: its files are
// stored owned by the stored range (common/id_ranges.h) and show with the same ids in every
// sandbox.
struct VolumeBind {
  std::string source;  // the volume's root directory on the host
  std::string target;  // absolute, normalized path inside the sandbox
  bool read_only = false;
};

struct LaunchSpec {
  std::string id;                       // the sandbox's host name (see Runtime)
  std::string rootfs;                   // the image's root directory (read-only lower layer)
  std::vector<std::string> host_binds;  // host dirs bound read-only at the same path (host image)
  std::string upper, work;              // the writable layer (overlayfs upper and work dirs)
  std::string staging;                  // a private dir of this sandbox for mount plumbing
  std::string ctl_socket;               // host path to bind the init control socket at
  uid_t host_uid = 0;                   // sandbox uid 0 maps here; kIdCount ids follow
  Limits limits;
  std::vector<VolumeBind> volumes;      // mounted in this order
};

// What identifies a running sandbox's init across daemon restarts.
struct InitProcess {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: guards against pid reuse
};

// Every call names a sandbox by its host name (LaunchSpec::id): what the host shows any local
// user (cgroup names), so never its API id.
class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual Result<InitProcess> Launch(const LaunchSpec& spec) = 0;
  virtual Status SetLimits(const std::string& id, const Limits& limits) = 0;
  virtual Result<core::SandboxUsage> Usage(const std::string& id) = 0;
  // Pause and resume: every process of the sandbox stops (keeping its memory) or goes on.
  virtual Status SetFrozen(const std::string& id, bool frozen) = 0;
  virtual bool Frozen(const std::string& id) = 0;
  // True if this init is still the live process it was.
  virtual bool Alive(const InitProcess& init) = 0;
  // Kills every process of the sandbox and removes its cgroups. Idempotent.
  virtual Status Destroy(const std::string& id, const InitProcess& init) = 0;
  // Cgroups of sandboxes this daemon created, for cleaning up after a crash.
  virtual std::vector<std::string> ListCgroups() = 0;
  // Renames a running sandbox's cgroups (a sandbox of an older version, named otherwise).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // The daemon is stopping: release host-wide things that no sandbox uses any more.
  virtual void Release() = 0;
};

}  // namespace bulkhead::runtime
