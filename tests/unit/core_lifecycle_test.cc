// The lifecycle's transition table and call plans (core/lifecycle.h), and warm-pool
// bookkeeping (core/warm_pool.h).
#include <gtest/gtest.h>

#include "core/lifecycle.h"
#include "core/warm_pool.h"

namespace bulkhead::core {
namespace {

TEST(Lifecycle, StatesRoundTripTheirNames) {
  for (State s : {State::kStarting, State::kPooled, State::kRunning, State::kPaused, State::kStopped, State::kError,
                  State::kDeleting})
    EXPECT_EQ(ParseState(StateName(s)), s);
  EXPECT_FALSE(ParseState("frozen"));
  EXPECT_FALSE(ParseState(""));
}

TEST(Lifecycle, OnlyTheDrawnMovesAreAllowed) {
  EXPECT_TRUE(CanMove(State::kStarting, State::kRunning));
  EXPECT_TRUE(CanMove(State::kPooled, State::kRunning));
  EXPECT_TRUE(CanMove(State::kRunning, State::kPaused));
  EXPECT_TRUE(CanMove(State::kPaused, State::kStopped));
  EXPECT_TRUE(CanMove(State::kError, State::kRunning));
  EXPECT_TRUE(CanMove(State::kStopped, State::kDeleting));
  EXPECT_FALSE(CanMove(State::kStopped, State::kPaused)) << "a stopped sandbox has nothing to freeze";
  EXPECT_FALSE(CanMove(State::kDeleting, State::kRunning)) << "nothing comes back from deleting";
  EXPECT_FALSE(CanMove(State::kRunning, State::kPooled));
  EXPECT_FALSE(CanMove(State::kPaused, State::kStarting));
}

TEST(Lifecycle, CallsPlanTheirStepFromEachState) {
  EXPECT_EQ(PlanFor(Call::kPause, State::kRunning).step, Step::kFreeze);
  EXPECT_EQ(PlanFor(Call::kPause, State::kPaused).step, Step::kNothing);
  EXPECT_EQ(PlanFor(Call::kPause, State::kStopped).step, Step::kRefuse);
  EXPECT_EQ(PlanFor(Call::kResume, State::kPaused).step, Step::kThaw);
  EXPECT_EQ(PlanFor(Call::kResume, State::kStopped).step, Step::kRefuse);
  EXPECT_NE(PlanFor(Call::kResume, State::kStopped).why.find("start"), std::string_view::npos);
  EXPECT_EQ(PlanFor(Call::kStop, State::kPaused).step, Step::kEnd);
  EXPECT_EQ(PlanFor(Call::kStop, State::kError).step, Step::kEnd);
  EXPECT_EQ(PlanFor(Call::kStop, State::kStopped).step, Step::kNothing);
  EXPECT_EQ(PlanFor(Call::kStart, State::kStopped).step, Step::kBoot);
  EXPECT_EQ(PlanFor(Call::kStart, State::kError).step, Step::kBoot);
  EXPECT_EQ(PlanFor(Call::kStart, State::kPaused).step, Step::kThaw);
  EXPECT_EQ(PlanFor(Call::kStart, State::kRunning).step, Step::kNothing);
  EXPECT_EQ(PlanFor(Call::kSnapshot, State::kStopped).step, Step::kCapture);
  EXPECT_EQ(PlanFor(Call::kSnapshot, State::kError).step, Step::kRefuse);
  EXPECT_EQ(PlanFor(Call::kHibernate, State::kRunning).step, Step::kHibernate);
  EXPECT_EQ(PlanFor(Call::kHibernate, State::kPaused).step, Step::kHibernate);
  EXPECT_EQ(PlanFor(Call::kHibernate, State::kStopped).step, Step::kRefuse);
  EXPECT_EQ(PlanFor(Call::kHibernate, State::kError).step, Step::kRefuse);
  // Every step a plan takes is a move the table allows.
  for (State s : {State::kRunning, State::kPaused, State::kStopped, State::kError}) {
    if (PlanFor(Call::kHibernate, s).step == Step::kHibernate) {
      EXPECT_TRUE(CanMove(s, State::kPaused));
    }
    for (Call c : {Call::kPause, Call::kResume, Call::kStop, Call::kStart}) {
      const Step step = PlanFor(c, s).step;
      if (step == Step::kFreeze) {
        EXPECT_TRUE(CanMove(s, State::kPaused));
      } else if (step == Step::kThaw || step == Step::kBoot) {
        EXPECT_TRUE(CanMove(s, State::kRunning));
      } else if (step == Step::kEnd) {
        EXPECT_TRUE(CanMove(s, State::kStopped));
      }
    }
  }
}

TEST(WarmPool, KeysAreFilledEmptiestFirstUpToTheirTargets) {
  WarmPool<int> pool;
  const PoolKey host{"native", "host", ""}, snap{"native", "host", "snap_1"};
  EXPECT_FALSE(pool.NextToFill());
  (void)pool.SetTarget(host, 2);
  (void)pool.SetTarget(snap, 1);
  EXPECT_EQ(pool.NextToFill(), host);  // both empty: key order
  EXPECT_TRUE(pool.Put(host, 1));
  EXPECT_EQ(pool.NextToFill(), snap);  // half full beats empty
  EXPECT_TRUE(pool.Put(snap, 10));
  EXPECT_EQ(pool.NextToFill(), host);
  EXPECT_TRUE(pool.Put(host, 2));
  EXPECT_FALSE(pool.NextToFill());
  EXPECT_FALSE(pool.Put(host, 3)) << "past its target";
  EXPECT_EQ(pool.Ready(), 3);
  EXPECT_EQ(pool.Take(host), 1) << "the longest waiting first";
  EXPECT_FALSE(pool.Take(PoolKey{"gvisor", "host", ""}));
}

TEST(WarmPool, LoweringATargetGivesBackTheSurplus) {
  WarmPool<int> pool;
  const PoolKey snap{"native", "host", "snap_1"};
  (void)pool.SetTarget(snap, 2);
  EXPECT_TRUE(pool.Put(snap, 1));
  EXPECT_TRUE(pool.Put(snap, 2));
  EXPECT_EQ(pool.SetTarget(snap, 0).size(), 2u);
  EXPECT_EQ(pool.Target(snap), 0);
  EXPECT_FALSE(pool.Put(snap, 3)) << "a refill that finishes after its pool went cold";
  EXPECT_EQ(pool.Ready(), 0);
  (void)pool.SetTarget(snap, 1);
  EXPECT_TRUE(pool.Put(snap, 4));
  EXPECT_EQ(pool.Drain(), std::vector<int>{4});
  EXPECT_FALSE(pool.NextToFill());
}

TEST(Lifecycle, APausedSandboxOnDiskIsBootedByResumeOrStartAndDroppedByStop) {
  EXPECT_EQ(PlanFor(Call::kResume, State::kPaused, true).step, Step::kBoot);
  EXPECT_EQ(PlanFor(Call::kStart, State::kPaused, true).step, Step::kBoot);
  EXPECT_EQ(PlanFor(Call::kPause, State::kPaused, true).step, Step::kNothing);
  EXPECT_EQ(PlanFor(Call::kHibernate, State::kPaused, true).step, Step::kNothing);
  EXPECT_EQ(PlanFor(Call::kStop, State::kPaused, true).step, Step::kEnd);
  EXPECT_EQ(PlanFor(Call::kSnapshot, State::kPaused, true).step, Step::kCapture);
  EXPECT_TRUE(CanMove(State::kPaused, State::kRunning));
  EXPECT_TRUE(CanMove(State::kPaused, State::kStopped));
  // Off disk, a paused sandbox thaws as before.
  EXPECT_EQ(PlanFor(Call::kResume, State::kPaused, false).step, Step::kThaw);
}

}  // namespace
}  // namespace bulkhead::core
