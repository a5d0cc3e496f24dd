// The memory guard's pace inside gVisor (src/init/memory_guard.h): how soon it looks again.
#include "init/memory_guard.h"

#include <gtest/gtest.h>

namespace bulkhead::init {
namespace {

constexpr int64_t kMiB = 1 << 20;

// The memory a bomb filling `mib_per_s` from nothing has in use at the first look that finds
// it over `limit`, the looks paced by NextLookMs from a look that saw nothing in use.
int64_t SeenOverLimitAt(int64_t limit, int64_t mib_per_s) {
  int64_t now_ms = 0;
  for (;;) {
    const int64_t used = now_ms * mib_per_s * kMiB / 1000;
    if (used > limit) return used;
    now_ms += static_cast<int64_t>(NextLookMs(used, limit));
  }
}

TEST(MemoryGuardPace, ABombIsSeenBeforeItGetsFarPastTheLimit) {
  // The escape probe touches 1.5 times the limit and stops: it must be seen over the limit
  // before that, at any fill rate up to twice the fastest measured (~2 GB/s). The pace lost
  // this at 256 MiB when a sandbox under a quarter of its limit was looked at every 200 ms.
  for (const int64_t limit_mib : {64, 256, 1024, 8192}) {
    for (const int64_t rate : {100, 1000, 2000, 4000}) {
      SCOPED_TRACE("limit " + std::to_string(limit_mib) + " MiB, " + std::to_string(rate) + " MiB/s");
      const int64_t seen = SeenOverLimitAt(limit_mib * kMiB, rate);
      EXPECT_LT(seen, limit_mib * kMiB + limit_mib * kMiB / 2);
      EXPECT_LE(seen, limit_mib * kMiB + rate * kMiB / 1000 * 5 + kMiB);  // within one 5 ms look
    }
  }
}

TEST(MemoryGuardPace, AQuietSandboxIsLookedAtRarelyAndNoneTooOften) {
  EXPECT_EQ(NextLookMs(16 * kMiB, 4096 * kMiB), 200u);
  EXPECT_EQ(NextLookMs(0, 0), 200u);      // no limit to hold
  EXPECT_EQ(NextLookMs(-1, 256 * kMiB), 200u);  // meminfo unreadable
  EXPECT_EQ(NextLookMs(256 * kMiB, 256 * kMiB), 5u);
  EXPECT_EQ(NextLookMs(255 * kMiB, 256 * kMiB), 5u);
  EXPECT_GE(NextLookMs(128 * kMiB, 256 * kMiB), 5u);
  EXPECT_LT(NextLookMs(128 * kMiB, 256 * kMiB), 200u);
}

}  // namespace
}  // namespace bulkhead::init
