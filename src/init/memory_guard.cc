#include "init/memory_guard.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "init/out_of_memory.h"

namespace bulkhead::init {
namespace {

int64_t guarded_bytes = 0;

// /proc/meminfo's AnonPages in bytes; -1 if it cannot be read.
int64_t AnonymousBytes() {
  FILE* meminfo = std::fopen("/proc/meminfo", "re");
  if (!meminfo) return -1;
  char line[128];
  long long kib = -1;
  while (std::fgets(line, sizeof line, meminfo)) {
    if (std::sscanf(line, "AnonPages: %lld kB", &kib) == 1) break;
  }
  std::fclose(meminfo);
  return kib < 0 ? -1 : kib * 1024;
}

}  // namespace

void SetGuardedMemory(int64_t limit_bytes) { guarded_bytes = limit_bytes; }
int64_t GuardedMemory() { return guarded_bytes; }

uint64_t NextLookMs(int64_t used_bytes, int64_t limit_bytes) {
  // A memory bomb inside gVisor fills ~1-2 GB/s (measured: malloc and touch 1 MiB at a time).
  // The next look comes before one filling twice that fast could cross the limit: a bomb is
  // seen within a few MB of it. A sandbox with 800 MB to spare is looked at 5 times a second,
  // a 256 MB one at rest every 64 ms (a look costs under 0.1 ms), one within 20 MB every 5 ms.
  constexpr int64_t kFastestFillBytesPerMs = 4 << 20;
  constexpr int64_t kSoonestMs = 5, kCalmMs = 200;
  if (limit_bytes <= 0 || used_bytes < 0) return kCalmMs;
  return static_cast<uint64_t>(std::clamp((limit_bytes - used_bytes) / kFastestFillBytesPerMs, kSoonestMs, kCalmMs));
}

uint64_t GuardMemory() {
  const int64_t used = AnonymousBytes();
  if (guarded_bytes <= 0 || used <= guarded_bytes) return NextLookMs(used, guarded_bytes);
  // As many as held the excess (their memory is freed as they exit: the next look, soon,
  // sees whether that was enough).
  constexpr uint64_t kAfterKillMs = 10, kNothingToKillMs = 25;
  return KillLargestProcesses(used - guarded_bytes).empty() ? kNothingToKillMs : kAfterKillMs;
}

}  // namespace bulkhead::init
