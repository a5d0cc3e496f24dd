// A time limit for the asynchronous operations of one strand: when it runs out, a callback
// (which cancels or closes the sockets involved) runs on that strand. Arming again or
// disarming makes an earlier, already queued expiry a no-op, so the callback never runs for a
// limit that was lifted, nor after the Deadline is gone (it may capture references).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace bulkhead::net {

class Deadline {
 public:
  // `executor`: the strand the guarded operations and the callback run on.
  explicit Deadline(const boost::asio::any_io_executor& executor) : state_(std::make_shared<State>(executor)) {}
  ~Deadline() { Disarm(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  // Runs `on_expire` in `timeout` unless disarmed or armed again first.
  void Arm(std::chrono::steady_clock::duration timeout, std::function<void()> on_expire) {
    Disarm();
    state_->expired = false;
    state_->on_expire = std::move(on_expire);
    state_->timer.expires_after(timeout);
    state_->timer.async_wait([state = state_, generation = state_->generation](boost::system::error_code ec) {
      if (ec || generation != state->generation) return;
      state->expired = true;
      auto on_expire = std::move(state->on_expire);
      state->on_expire = nullptr;
      if (on_expire) on_expire();
    });
  }

  void Disarm() {
    ++state_->generation;
    state_->on_expire = nullptr;
    state_->timer.cancel();
  }

  // Whether the last armed limit ran out.
  bool expired() const { return state_->expired; }

 private:
  // Shared with the pending wait, which may outlive the Deadline.
  struct State {
    explicit State(const boost::asio::any_io_executor& executor) : timer(executor) {}
    boost::asio::steady_timer timer;
    uint64_t generation = 0;
    bool expired = false;
    std::function<void()> on_expire;
  };
  std::shared_ptr<State> state_;
};

}  // namespace bulkhead::net
