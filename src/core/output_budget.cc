#include "core/output_budget.h"

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::core {
namespace {

constexpr double kSlackSeconds = 0.02;

}  // namespace

OutputBudget::OutputBudget(int64_t bytes_per_second, int64_t burst_bytes)
    : rate_(static_cast<double>(bytes_per_second)),
      burst_(static_cast<double>(burst_bytes)),
      tokens_(static_cast<double>(burst_bytes)),
      refilled_(std::chrono::steady_clock::now()) {}

std::chrono::nanoseconds OutputBudget::Take(size_t bytes) {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const double elapsed_s = std::chrono::duration<double>(now - refilled_).count();
  refilled_ = now;
  tokens_ = std::min(burst_, tokens_ + elapsed_s * rate_);
  tokens_ -= static_cast<double>(bytes);
  // A little debt waits for nothing: a sleep per small frame would cost the daemon more in
  // wakeups than the relay itself. The debt is paid in one wait once it reaches kSlack.
  if (tokens_ >= -rate_ * kSlackSeconds) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<int64_t>(-tokens_ / rate_ * 1e9));
}

boost::asio::awaitable<void> PaceOutput(OutputBudget* budget, size_t bytes) {
  if (budget == nullptr) co_return;
  const std::chrono::nanoseconds wait = budget->Take(bytes);
  if (wait.count() <= 0) co_return;
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, wait);
  boost::system::error_code ec;
  co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
}

}  // namespace bulkhead::core
