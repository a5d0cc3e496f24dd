// The microvm tier's template bookkeeping: a shape's first launch starts its build and boots
// cold (or waits for it, Wait); later launches restore once it is built; a failed build is
// reported, not retried.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/microvm/template.h"

namespace bulkhead::runtime::microvm {
namespace {

// Waits until `templates` reports `shape` as no longer building.
void WaitBuilt(const Templates& templates) {
  for (int i = 0; i < 1000; i++) {
    auto states = templates.States();
    if (!states.empty() && states[0].second != "building") return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(Templates, TheFirstAskStartsTheBuildAndLaterOnesGetTheSavedState) {
  std::atomic<int> builds = 0;
  Templates templates([&](const GuestShape& shape, const std::atomic<bool>&) -> Result<std::string> {
    builds++;
    return "/state/template-" + shape.Name() + ".state";
  });
  const GuestShape shape{512, 2};
  EXPECT_FALSE(templates.Ready(shape).has_value());
  WaitBuilt(templates);
  auto saved = templates.Ready(shape);
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(*saved, "/state/template-512m-2cpu.state");
  EXPECT_EQ(templates.Ready(shape), saved);
  EXPECT_EQ(builds.load(), 1);
  ASSERT_EQ(templates.States().size(), 1u);
  EXPECT_EQ(templates.States()[0], std::make_pair(std::string("512m-2cpu"), std::string("ready")));
}

TEST(Templates, AFailedBuildIsReportedAndItsShapeBootsCold) {
  std::atomic<int> builds = 0;
  Templates templates([&](const GuestShape&, const std::atomic<bool>&) -> Result<std::string> {
    builds++;
    return MakeError(ErrorCode::kInternal, "no monitor");
  });
  const GuestShape shape{128, 1};
  EXPECT_FALSE(templates.Ready(shape).has_value());
  WaitBuilt(templates);
  EXPECT_FALSE(templates.Ready(shape).has_value());
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(templates.States()[0].second, "failed: no monitor");
}

TEST(Templates, GoingAwayTellsABuildUnderWayToStop) {
  std::atomic<bool> saw_stop = false;
  {
    Templates templates([&](const GuestShape&, const std::atomic<bool>& stopping) -> Result<std::string> {
      while (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      saw_stop = true;
      return MakeError(ErrorCode::kUnavailable, "the daemon stops");
    });
    EXPECT_FALSE(templates.Ready({128, 1}).has_value());
  }
  EXPECT_TRUE(saw_stop.load());
}

TEST(Templates, WaitTakesTheBuildItStartsOrFindsUnlessItOutlastsTheDeadline) {
  std::atomic<bool> release = false;
  std::atomic<int> builds = 0;
  Templates templates([&](const GuestShape& shape, const std::atomic<bool>& stopping) -> Result<std::string> {
    builds++;
    while (!release && !stopping) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return shape.Name();
  });
  const GuestShape shape{256, 1};
  const auto soon = [] { return std::chrono::steady_clock::now() + std::chrono::milliseconds(20); };
  EXPECT_FALSE(templates.Wait(shape, soon()).has_value());  // started it, gave up waiting
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    release = true;
  });
  EXPECT_EQ(templates.Wait(shape, std::chrono::steady_clock::now() + std::chrono::seconds(10)), "256m-1cpu");
  releaser.join();
  EXPECT_EQ(templates.Ready(shape), "256m-1cpu");
  EXPECT_EQ(builds.load(), 1);
}

TEST(Templates, EachShapeHasItsOwn) {
  Templates templates([](const GuestShape& shape, const std::atomic<bool>&) -> Result<std::string> { return shape.Name(); });
  EXPECT_FALSE(templates.Ready({128, 1}).has_value());
  EXPECT_FALSE(templates.Ready({256, 1}).has_value());
  EXPECT_EQ(templates.States().size(), 2u);
}

}  // namespace
}  // namespace bulkhead::runtime::microvm
