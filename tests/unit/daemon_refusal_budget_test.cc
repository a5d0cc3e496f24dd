// RefusalBudget: a source's first refusals of a window are recorded, the rest counted and
// handed over once when the window ends; many sources share one entry past the cap.
#include <gtest/gtest.h>

#include "daemon/refusal_budget.h"

namespace bulkhead::api {
namespace {

constexpr int64_t kWindow = RefusalBudget::kWindowMs;

TEST(RefusalBudget, TheFirstOfAWindowAreRecordedAndTheRestCountedOnce) {
  RefusalBudget budget;
  for (int i = 0; i < RefusalBudget::kPerWindow; ++i) EXPECT_TRUE(budget.Admit("10.0.0.1", 1000 + i));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(budget.Admit("10.0.0.1", 2000));
  EXPECT_TRUE(budget.Admit("10.0.0.2", 2000));  // another source has its own budget
  EXPECT_TRUE(budget.TakeCounted(1000 + kWindow - 1).empty());  // not ended yet
  auto counted = budget.TakeCounted(1000 + kWindow);
  ASSERT_EQ(counted.size(), 1u);
  EXPECT_EQ(counted[0].source, "10.0.0.1");
  EXPECT_EQ(counted[0].refusals, 5);
  EXPECT_EQ(counted[0].window_start_ms, 1000);
  EXPECT_TRUE(budget.TakeCounted(1000 + 3 * kWindow).empty());  // handed over once
  EXPECT_TRUE(budget.Admit("10.0.0.1", 1000 + 3 * kWindow));     // a new window
}

TEST(RefusalBudget, AQuietWindowStartsAnewWithoutAFlush) {
  RefusalBudget budget;
  EXPECT_TRUE(budget.Admit("a", 0));
  for (int i = 1; i < RefusalBudget::kPerWindow; ++i) EXPECT_TRUE(budget.Admit("a", kWindow + i));
  EXPECT_TRUE(budget.Admit("a", kWindow + 100));  // the first window ended with one refusal
}

TEST(RefusalBudget, ManySourcesShareOneEntryPastTheCap) {
  RefusalBudget budget;
  for (size_t i = 0; i < RefusalBudget::kMaxSources; ++i) budget.Admit("s" + std::to_string(i), 0);
  for (int i = 0; i < RefusalBudget::kPerWindow; ++i) EXPECT_TRUE(budget.Admit("new" + std::to_string(i), 0));
  EXPECT_FALSE(budget.Admit("one-more", 0));
  auto counted = budget.TakeCounted(kWindow);
  ASSERT_EQ(counted.size(), 1u);
  EXPECT_EQ(counted[0].source, "*");
  EXPECT_EQ(counted[0].refusals, 1);
}

}  // namespace
}  // namespace bulkhead::api
