// Warm pools: sandboxes booted ahead of the creates that take them, kept per key (tier, image,
// snapshot) up to each key's target. Plain bookkeeping, not thread-safe: the manager holds its
// lock around every call and does the booting and tearing down itself.
#pragma once
#include <compare>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bulkhead::core {

struct PoolKey {
  std::string tier;
  std::string image;
  std::string snapshot;  // "" = an empty workspace
  auto operator<=>(const PoolKey&) const = default;
};

template <typename T>
class WarmPool {
 public:
  // How many ready ones to keep for `key`; 0 drops the key. Answers the ready ones past the
  // new target, for the caller to tear down.
  std::vector<T> SetTarget(const PoolKey& key, int target) {
    std::vector<T> surplus;
    auto& ready = ready_[key];
    while (static_cast<int>(ready.size()) > target) {
      surplus.push_back(std::move(ready.back()));
      ready.pop_back();
    }
    if (target > 0) {
      targets_[key] = target;
    } else {
      targets_.erase(key);
      ready_.erase(key);
    }
    return surplus;
  }
  int Target(const PoolKey& key) const {
    auto it = targets_.find(key);
    return it == targets_.end() ? 0 : it->second;
  }

  // A ready one for `key`, the longest waiting first; nullopt if there is none.
  std::optional<T> Take(const PoolKey& key) {
    auto it = ready_.find(key);
    if (it == ready_.end() || it->second.empty()) return std::nullopt;
    T item = std::move(it->second.front());
    it->second.pop_front();
    return item;
  }
  // Adds a freshly booted one. False (and the caller tears it down) if the key no longer
  // wants it (its target went down or away while it booted).
  bool Put(const PoolKey& key, T item) {
    auto& ready = ready_[key];
    if (static_cast<int>(ready.size()) >= Target(key)) return false;
    ready.push_back(std::move(item));
    return true;
  }

  // The key furthest below its target (the emptiest first, then the key order), if any.
  std::optional<PoolKey> NextToFill() const {
    std::optional<PoolKey> best;
    double best_fill = 1.0;
    for (const auto& [key, target] : targets_) {
      auto it = ready_.find(key);
      const double fill = static_cast<double>(it == ready_.end() ? 0 : it->second.size()) / target;
      if (fill < best_fill) best = key, best_fill = fill;
    }
    return best;
  }

  int Ready() const {
    size_t n = 0;
    for (const auto& [key, ready] : ready_) n += ready.size();
    return static_cast<int>(n);
  }
  // Every ready one, and no targets left (the daemon is stopping).
  std::vector<T> Drain() {
    std::vector<T> all;
    for (auto& [key, ready] : ready_)
      for (auto& item : ready) all.push_back(std::move(item));
    ready_.clear();
    targets_.clear();
    return all;
  }

 private:
  std::map<PoolKey, int> targets_;
  std::map<PoolKey, std::deque<T>> ready_;
};

}  // namespace bulkhead::core
