// What a sandbox uses now, as its tier measures it (disk is storage's).
#pragma once
#include <cstdint>

namespace bulkhead::runtime {

struct Usage {
  double cpu_s = 0;
  int64_t memory_bytes = 0;
  int64_t disk_bytes = 0;
  int64_t pids = 0;
};

// RLIMIT_NOFILE for a sandbox's commands under a memory limit: each socket a command holds may
// queue about 64 KiB past the TCP buffer limit (a quarter of the memory limit, TcpBufferBytes),
// and that many must fit in the rest of the limit; never below 1024, the customary default (so
// below ~85 MiB the bound is looser), at most 1M (Docker's). Sent with every exec request: a
// sandbox from the warm pool gets its limits after its init started.
constexpr int64_t TcpBufferBytes(int64_t memory_bytes) { return memory_bytes / 4; }
uint64_t DescriptorLimit(int64_t memory_bytes);

}  // namespace bulkhead::runtime
