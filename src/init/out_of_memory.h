// What init does when its sandbox ran out of memory and the host's OOM killer was kept away
// from it (ctl::kReclaim): what the kernel's would do inside the sandbox.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace bulkhead::init {

struct Killed {
  pid_t pid = 0;
  int64_t resident_bytes = 0;
};

// SIGKILLs the sandbox's processes, largest resident set first, init itself excepted, until
// those killed held at least `bytes` (1: the largest alone) or none is left. Answers those
// killed, largest first.
std::vector<Killed> KillLargestProcesses(int64_t bytes);

}  // namespace bulkhead::init
