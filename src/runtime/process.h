// Host processes a tier hands the core as a sandbox's handle, told apart from a later
// process that got the same pid.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "runtime/tier.h"

namespace bulkhead::runtime {

// /proc/<pid>/stat field 22, or 0 if the process is gone (or a zombie).
uint64_t ProcessStartTime(pid_t pid);

// The handle of the running process `pid`.
SandboxHandle HandleOf(pid_t pid);

// True while the process the handle names still runs.
bool HandleAlive(const SandboxHandle& handle);

// The network namespace of the handle's process, opened first and checked after, so that it
// is that process's and not a reused pid's.
Result<NetworkAttachment> NetworkOf(const SandboxHandle& handle);

}  // namespace bulkhead::runtime
