#include "core/usage_history.h"

#include <algorithm>

namespace bulkhead::core {

size_t UsageHistory::ShareLocked() const {
  return std::clamp<size_t>(max_samples_ / std::max<size_t>(1, rings_.size()), 1, kPerSandbox);
}

void UsageHistory::DropOldestLocked(Ring& ring, size_t keep) {
  while (ring.samples.size() > keep) {
    ring.samples.pop_front();
    --total_;
  }
}

void UsageHistory::Record(const std::string& id, int64_t unix_ms, const SandboxUsage& usage, double cpus,
                          int64_t started_ms) {
  std::lock_guard lock(mu_);
  Ring& ring = rings_[id];
  // The first reading of this boot (a count that went back is one too): the share since it began.
  const bool fresh = ring.read_ms == 0 || started_ms != ring.started_ms || usage.cpu_s < ring.cpu_s;
  const double since_cpu = fresh ? 0 : ring.cpu_s;
  const int64_t since_ms = fresh ? started_ms : ring.read_ms;
  const double seconds = std::max(0.001, static_cast<double>(unix_ms - since_ms) / 1000.0);
  const double pct = 100.0 * (usage.cpu_s - since_cpu) / seconds / std::max(cpus, 0.01);
  ring.cpu_s = usage.cpu_s;
  ring.read_ms = unix_ms;
  ring.started_ms = started_ms;
  ring.samples.push_back({unix_ms, static_cast<float>(std::clamp(pct, 0.0, 100.0)), usage.memory_bytes,
                          usage.disk_bytes});
  ++total_;
  DropOldestLocked(ring, ShareLocked());
}

std::vector<UsageSample> UsageHistory::Between(const std::string& id, int64_t from_ms, int64_t to_ms) const {
  std::lock_guard lock(mu_);
  std::vector<UsageSample> out;
  const auto found = rings_.find(id);
  if (found == rings_.end()) return out;
  for (const UsageSample& sample : found->second.samples) {
    if (sample.unix_ms >= from_ms && sample.unix_ms <= to_ms) out.push_back(sample);
  }
  return out;
}

int64_t UsageHistory::LastSampleMs(const std::string& id) const {
  std::lock_guard lock(mu_);
  const auto found = rings_.find(id);
  return found == rings_.end() || found->second.samples.empty() ? 0 : found->second.samples.back().unix_ms;
}

void UsageHistory::Forget(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto found = rings_.find(id);
  if (found == rings_.end()) return;
  total_ -= found->second.samples.size();
  rings_.erase(found);
}

void UsageHistory::Trim(int64_t now_ms) {
  std::lock_guard lock(mu_);
  const size_t share = ShareLocked();
  for (auto it = rings_.begin(); it != rings_.end();) {
    Ring& ring = it->second;
    while (!ring.samples.empty() && ring.samples.front().unix_ms < now_ms - kWindowMs) {
      ring.samples.pop_front();
      --total_;
    }
    DropOldestLocked(ring, share);
    // Empty only once its newest sample is an hour old: a sandbox that stopped running.
    it = ring.samples.empty() ? rings_.erase(it) : std::next(it);
  }
}

size_t UsageHistory::SampleCount() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace bulkhead::core
