// The sandbox's memory limit inside gVisor. gVisor's kernel accounts the sandbox's memory but
// enforces no limit and has no OOM killer, and the host's cgroup (the limit plus the Sentry's
// own room, runtime/gvisor) stalls the whole sandbox when it fills: a fork bomb of processes
// that each dirty their copy of memory could run it into the host's limit faster than the
// daemon's rescue (ctl::kReclaim) gets init to act. So init, where it contained itself, looks
// at the sandbox's memory that nothing can reclaim (/proc/meminfo's AnonPages: anonymous and
// tmpfs pages, what the kernel's OOM killer weighs) and kills the largest processes while it
// is over the limit, as the kernel's memory cgroup would on native.
#pragma once
#include <cstdint>

namespace bulkhead::init {

// The limit to hold (the sandbox's memory_mb); 0 = none (the native tier's kernel holds it).
void SetGuardedMemory(int64_t limit_bytes);
int64_t GuardedMemory();

// One look: kills the largest processes, as many as held the excess, if the sandbox is over
// its limit. Answers how many milliseconds until the next look (NextLookMs).
uint64_t GuardMemory();

// Milliseconds until the next look with `used_bytes` of `limit_bytes` in use: soon enough that
// the fastest fill seen could not cross the limit meanwhile, and at most 200.
uint64_t NextLookMs(int64_t used_bytes, int64_t limit_bytes);

}  // namespace bulkhead::init
