#include "runtime/usage.h"

#include <algorithm>

namespace bulkhead::runtime {

uint64_t DescriptorLimit(int64_t memory_bytes) {
  constexpr int64_t kSocketSlack = 64 << 10;
  const int64_t fit = (memory_bytes - TcpBufferBytes(memory_bytes)) / kSocketSlack;
  return static_cast<uint64_t>(std::clamp<int64_t>(fit, 1024, 1 << 20));
}

}  // namespace bulkhead::runtime
