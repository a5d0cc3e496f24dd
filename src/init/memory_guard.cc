#include "init/memory_guard.h"

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

uint64_t GuardMemory() {
  // A memory bomb fills a few hundred MB a second: from a quarter of the limit on, it is
  // looked at often enough that the host's margin above the limit is not crossed.
  constexpr uint64_t kCalmMs = 200, kNearMs = 25, kKilledMs = 10;
  const int64_t used = AnonymousBytes();
  if (guarded_bytes <= 0 || used < 0) return kCalmMs;
  if (used <= guarded_bytes) return used < guarded_bytes / 4 ? kCalmMs : kNearMs;
  // As many as held the excess (their memory is freed as they exit: the next look, soon,
  // sees whether that was enough).
  return KillLargestProcesses(used - guarded_bytes).empty() ? kNearMs : kKilledMs;
}

}  // namespace bulkhead::init
