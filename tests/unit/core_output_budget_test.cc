#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/output_budget.h"

namespace bulkhead::core {
namespace {

using std::chrono::milliseconds;

TEST(OutputBudget, TheBurstPassesAtOnceAndMoreWaitsAtTheRate) {
  OutputBudget budget(1000, 500);  // 1000 bytes/s, 500 at once
  EXPECT_EQ(budget.Take(500).count(), 0);
  // 250 bytes over: a quarter of a second (less the microseconds since the first Take).
  const auto wait = budget.Take(250);
  EXPECT_GT(wait, milliseconds(240));
  EXPECT_LE(wait, milliseconds(250));
}

TEST(OutputBudget, OverdrawingCallersShareTheDebt) {
  OutputBudget budget(1000, 100);
  EXPECT_EQ(budget.Take(100).count(), 0);
  const auto first = budget.Take(100);   // the first in line waits 0.1 s
  const auto second = budget.Take(100);  // the next one behind it 0.2 s: the sum keeps the rate
  EXPECT_GT(first, milliseconds(90));
  EXPECT_GT(second, milliseconds(190));
  EXPECT_LE(second, milliseconds(200));
}

TEST(OutputBudget, ADebtUnderTwentyMillisecondsWaitsForNothing) {
  OutputBudget budget(1000, 100);
  EXPECT_EQ(budget.Take(100).count(), 0);
  EXPECT_EQ(budget.Take(10).count(), 0);  // 10 ms' worth of debt
  EXPECT_GT(budget.Take(20), milliseconds(25));  // 30 ms' worth: paid in one wait
}

TEST(OutputBudget, AQuietTimeRefillsUpToTheBurstOnly) {
  OutputBudget budget(10000, 100);
  EXPECT_EQ(budget.Take(100).count(), 0);
  std::this_thread::sleep_for(milliseconds(50));  // 500 bytes' worth of time, capped at 100
  EXPECT_EQ(budget.Take(100).count(), 0);
  EXPECT_GT(budget.Take(300), milliseconds(25));  // had it refilled 500, this would pass free
}

}  // namespace
}  // namespace bulkhead::core
