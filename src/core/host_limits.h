// What the host must allow for the number of sandboxes the daemon may hold: the sandbox cap's
// default, derived from the host's memory, and the kernel limits a full host needs (pids,
// descriptors, namespaces), raised at start only where the host's are lower, and logged.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bulkhead::core {

// --max-sandboxes when not given: a quarter of the host's memory in MiB (room for idle
// sandboxes at a few MiB each with the rest left to what they run), within [64, the uid
// ranges the host has].
int64_t DefaultMaxSandboxes(int64_t memory_mib);
int64_t HostMemoryMib();

struct KernelLimit {
  std::string path;  // under /proc/sys
  int64_t needed = 0;
};

// The sysctls `max_sandboxes` sandboxes need. A sandbox holds a few host pids (init, what it
// runs), its own user, mount, pid, net, ipc, uts and cgroup namespaces (and a second user
// namespace: the stored ids' mapping). The kernel counts namespaces and inotify instances
// made inside a user namespace against its owner at each level above it too: every
// sandbox's are host root's in the host's namespace, so the host's per-user limits (128
// inotify instances on Debian) bound all sandboxes together, not each.
std::vector<KernelLimit> KernelLimitsFor(int64_t max_sandboxes);

// Raises each of KernelLimitsFor's sysctls that is lower (logged); a value the kernel refuses
// is logged and left. And the daemon's descriptor limit (each sandbox and connection holds a
// few).
void RaiseHostLimits(int64_t max_sandboxes);

}  // namespace bulkhead::core
