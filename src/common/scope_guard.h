// Runs a function when the scope ends unless dismissed: undo steps of a half-made sandbox.
#pragma once
#include <functional>
#include <utility>

namespace bulkhead {

class ScopeGuard {
 public:
  explicit ScopeGuard(std::function<void()> fn) : fn_(std::move(fn)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ~ScopeGuard() {
    if (fn_) fn_();
  }
  void Dismiss() { fn_ = nullptr; }

 private:
  std::function<void()> fn_;
};

}  // namespace bulkhead
