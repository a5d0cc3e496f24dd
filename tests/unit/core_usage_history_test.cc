#include <gtest/gtest.h>

#include <vector>

#include "core/usage_history.h"

namespace bulkhead::core {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;  // unix ms
constexpr int64_t kStep = UsageHistory::kIntervalMs;

SandboxUsage Using(double cpu_s, int64_t memory = 1 << 20, int64_t disk = 4096) {
  SandboxUsage usage;
  usage.cpu_s = cpu_s;
  usage.memory_bytes = memory;
  usage.disk_bytes = disk;
  return usage;
}

std::vector<int64_t> TimesOf(const std::vector<UsageSample>& samples) {
  std::vector<int64_t> times;
  for (const UsageSample& sample : samples) times.push_back(sample.unix_ms);
  return times;
}

TEST(UsageHistory, BetweenIsTheInclusiveRangeOldestFirstAndEmptyBeforeTheFirstSample) {
  UsageHistory history;
  for (int i = 1; i <= 4; ++i) history.Record("a", kStart + i * kStep, Using(0), 1, kStart);
  EXPECT_EQ(TimesOf(history.Between("a", kStart + 2 * kStep, kStart + 3 * kStep)),
            (std::vector<int64_t>{kStart + 2 * kStep, kStart + 3 * kStep}));
  EXPECT_EQ(history.Between("a", 0, kStart + 4 * kStep).size(), 4u);
  EXPECT_TRUE(history.Between("a", 0, kStart + kStep - 1).empty());  // before the sandbox was sampled
  EXPECT_TRUE(history.Between("b", 0, kStart + 4 * kStep).empty());  // another sandbox
  EXPECT_EQ(history.LastSampleMs("a"), kStart + 4 * kStep);
  EXPECT_EQ(history.LastSampleMs("b"), 0);
  const UsageSample sample = history.Between("a", 0, kStart + kStep).front();
  EXPECT_EQ(sample.memory_bytes, 1 << 20);
  EXPECT_EQ(sample.disk_bytes, 4096);
}

TEST(UsageHistory, CpuIsTheShareOfTheSandboxsCpusSinceTheReadingBeforeOrItsBoot) {
  UsageHistory history;
  history.Record("a", kStart + 10'000, Using(5), 2, kStart);        // 5 s of 2 CPUs over 10 s
  history.Record("a", kStart + 20'000, Using(5), 2, kStart);        // idle since
  history.Record("a", kStart + 30'000, Using(25), 2, kStart);       // both CPUs busy
  history.Record("a", kStart + 40'000, Using(1), 2, kStart + 38'000);  // booted again: since its boot
  std::vector<float> pct;
  for (const UsageSample& sample : history.Between("a", 0, kStart + 40'000)) pct.push_back(sample.cpu_pct);
  ASSERT_EQ(pct.size(), 4u);
  EXPECT_FLOAT_EQ(pct[0], 25);
  EXPECT_FLOAT_EQ(pct[1], 0);
  EXPECT_FLOAT_EQ(pct[2], 100);
  EXPECT_FLOAT_EQ(pct[3], 25);
}

TEST(UsageHistory, EachSandboxKeepsAnHourAndAllTogetherNoMoreThanTheBound) {
  UsageHistory one;
  for (size_t i = 0; i < UsageHistory::kPerSandbox + 10; ++i) one.Record("a", kStart + i * kStep, Using(0), 1, kStart);
  EXPECT_EQ(one.SampleCount(), UsageHistory::kPerSandbox);
  EXPECT_EQ(one.Between("a", 0, kStart).size(), 0u);  // the oldest went first

  UsageHistory bounded(12);
  for (int i = 0; i < 10; ++i) bounded.Record("a", kStart + i * kStep, Using(0), 1, kStart);
  EXPECT_EQ(bounded.SampleCount(), 10u);
  for (int i = 0; i < 10; ++i) {
    bounded.Record("b", kStart + i * kStep, Using(0), 1, kStart);
    bounded.Record("c", kStart + i * kStep, Using(0), 1, kStart);
  }
  bounded.Trim(kStart + 10 * kStep);  // brings "a" down to its share too
  EXPECT_LE(bounded.SampleCount(), 12u);
  EXPECT_EQ(bounded.Between("a", 0, kStart + 10 * kStep).size(), 4u);
  EXPECT_EQ(TimesOf(bounded.Between("c", 0, kStart + 10 * kStep)).front(), kStart + 6 * kStep);
}

TEST(UsageHistory, TrimDropsWhatIsOlderThanTheWindowAndForgetDropsASandbox) {
  UsageHistory history;
  history.Record("old", kStart, Using(0), 1, kStart);
  history.Record("a", kStart, Using(0), 1, kStart);
  history.Record("a", kStart + UsageHistory::kWindowMs, Using(0), 1, kStart);
  history.Trim(kStart + UsageHistory::kWindowMs + 1);
  EXPECT_EQ(history.LastSampleMs("old"), 0);
  EXPECT_EQ(TimesOf(history.Between("a", 0, kStart + UsageHistory::kWindowMs)),
            (std::vector<int64_t>{kStart + UsageHistory::kWindowMs}));
  EXPECT_EQ(history.SampleCount(), 1u);
  history.Forget("a");
  EXPECT_EQ(history.SampleCount(), 0u);
  EXPECT_TRUE(history.Between("a", 0, kStart + UsageHistory::kWindowMs).empty());
}

}  // namespace
}  // namespace bulkhead::core
