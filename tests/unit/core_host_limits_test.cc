// The sandbox cap's default and the kernel limits a full host needs (core/host_limits.h).
#include "core/host_limits.h"

#include <gtest/gtest.h>

#include "runtime/uid_ranges.h"

namespace bulkhead::core {
namespace {

TEST(HostLimitsTest, TheDefaultCapIsAQuarterOfTheMemoryInMibWithinTheUidRanges) {
  EXPECT_EQ(DefaultMaxSandboxes(24 * 1024), 6144);
  EXPECT_EQ(DefaultMaxSandboxes(64 * 1024), 16384);
  EXPECT_EQ(DefaultMaxSandboxes(100), 64) << "a tiny host still holds a few";
  EXPECT_EQ(DefaultMaxSandboxes(int64_t{1} << 30), runtime::kSlots) << "no more than there are uid ranges";
  EXPECT_GT(HostMemoryMib(), 0);
}

TEST(HostLimitsTest, KernelLimitsGrowWithTheCapAndCoverEveryNamespaceASandboxMakes) {
  auto small = KernelLimitsFor(100), large = KernelLimitsFor(10000);
  ASSERT_EQ(small.size(), large.size());
  for (size_t i = 0; i < small.size(); i++) {
    EXPECT_EQ(small[i].path, large[i].path);
    EXPECT_LT(small[i].needed, large[i].needed) << small[i].path;
    EXPECT_GE(large[i].needed, 10000) << large[i].path;
  }
  for (const char* path : {"kernel/pid_max", "fs/inotify/max_user_instances", "user/max_user_namespaces",
                           "user/max_mnt_namespaces", "user/max_pid_namespaces", "user/max_net_namespaces",
                           "user/max_ipc_namespaces", "user/max_uts_namespaces", "user/max_cgroup_namespaces"}) {
    bool found = false;
    for (const auto& limit : large) found |= limit.path == path;
    EXPECT_TRUE(found) << path;
  }
  for (const auto& limit : large) {
    if (limit.path == "user/max_user_namespaces") {
      EXPECT_GE(limit.needed, 20000) << "two per sandbox";
    }
  }
}

}  // namespace
}  // namespace bulkhead::core
