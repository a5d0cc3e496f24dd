// How fast the daemon relays one sandbox's command output, summed over every exec, follow
// and attach of that sandbox. The relay is the daemon's CPU (reading init's frames, encoding
// JSON, writing HTTP) spent on behalf of one sandbox, outside its cgroup: without a cap, a
// sandbox printing as fast as it can and clients reading as fast as they can take a host
// core from every other sandbox. Over the cap, the next frame is read later, so the output
// backs up into the sandbox (its writes block) or into init's output ring (a follower sees
// a gap event).
#pragma once
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace bulkhead::core {

class OutputBudget {
 public:
  // A token bucket: `bytes_per_second` on average, `burst_bytes` at once after a quiet time.
  OutputBudget(int64_t bytes_per_second, int64_t burst_bytes);

  // Takes `bytes` (already read) from the budget: how long the caller waits before it reads
  // more (nothing while the debt is under 20 ms' worth). Callers that overdraw share the
  // debt, so the sum over all of them keeps the rate.
  std::chrono::nanoseconds Take(size_t bytes);

 private:
  std::mutex mu_;
  const double rate_;   // bytes per second
  const double burst_;  // bytes
  double tokens_;
  std::chrono::steady_clock::time_point refilled_;
};

// Waits as long as budget->Take(bytes) says; returns at once when budget is null (no cap).
boost::asio::awaitable<void> PaceOutput(OutputBudget* budget, size_t bytes);

}  // namespace bulkhead::core
