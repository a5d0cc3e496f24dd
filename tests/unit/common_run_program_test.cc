#include "common/run_program.h"

#include <gtest/gtest.h>

#include <chrono>

namespace bulkhead {
namespace {

using namespace std::chrono_literals;

TEST(RunProgram, AnswersWhatItPrintedAndFailsOnAnExitOtherThanZero) {
  auto printed = RunProgramOutput({"/bin/sh", "-c", "echo out; echo err >&2"});
  ASSERT_TRUE(printed) << printed.error().message;
  EXPECT_EQ(*printed, "out\nerr\n");
  auto failed = RunProgramOutput({"/bin/sh", "-c", "echo why; exit 3"});
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("exited 3: why"), std::string::npos) << failed.error().message;
}

TEST(RunProgram, KillsAToolThatOutlivesItsTimeout) {
  const auto start = std::chrono::steady_clock::now();
  // A tool that hangs, and a child of it that keeps the output pipe open after it is killed.
  auto hung = RunProgramOutput({"/bin/sh", "-c", "echo started; sleep 30 & sleep 30"}, 300ms);
  ASSERT_FALSE(hung);
  EXPECT_EQ(hung.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(hung.error().message.find("did not finish within 300 ms: started"), std::string::npos)
      << hung.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  auto quick = RunProgramOutput({"/bin/echo", "in time"}, 10s);
  ASSERT_TRUE(quick) << quick.error().message;
  EXPECT_EQ(*quick, "in time\n");
}

}  // namespace
}  // namespace bulkhead
