// A short history of each sandbox's usage, for E2B's metrics (GET /sandboxes/{id}/metrics with
// start and end): the manager samples every running sandbox about every kIntervalMs and keeps
// the last hour of samples. Bounded twice: per sandbox (an hour's worth), and in all, so that
// ten thousand sandboxes hold no more than kMaxSamples together: the more sandboxes have
// samples, the fewer each keeps (its oldest go first). Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/types.h"

namespace bulkhead::core {

struct UsageSample {
  int64_t unix_ms = 0;
  float cpu_pct = 0;  // of the sandbox's CPUs, 0..100, since the sample before (or its start)
  int64_t memory_bytes = 0;
  int64_t disk_bytes = 0;
};

class UsageHistory {
 public:
  static constexpr int64_t kIntervalMs = 5000;
  static constexpr int64_t kWindowMs = 3600 * 1000;
  static constexpr size_t kPerSandbox = kWindowMs / kIntervalMs;  // 720
  static constexpr size_t kMaxSamples = 256 * 1024;               // 8 MiB of samples in all

  explicit UsageHistory(size_t max_samples = kMaxSamples) : max_samples_(max_samples) {}

  // Adds a reading taken at `unix_ms`: `usage.cpu_s` is the CPU time of the sandbox's boot
  // that began at `started_ms`, which becomes a share of `cpus` since the previous reading of
  // that boot, or since `started_ms` (its first reading: a new sandbox, or one booted again).
  void Record(const std::string& id, int64_t unix_ms, const SandboxUsage& usage, double cpus, int64_t started_ms);
  // The samples taken from_ms..to_ms (inclusive), oldest first.
  std::vector<UsageSample> Between(const std::string& id, int64_t from_ms, int64_t to_ms) const;
  // When the last sample was taken; 0 if none is kept.
  int64_t LastSampleMs(const std::string& id) const;
  void Forget(const std::string& id);
  // Drops samples older than kWindowMs before `now_ms` and those past each sandbox's share,
  // and the sandboxes left without any (a later reading of one counts from its start again).
  void Trim(int64_t now_ms);

  size_t SampleCount() const;

 private:
  struct Ring {
    std::deque<UsageSample> samples;
    double cpu_s = 0;  // at the last reading
    int64_t read_ms = 0;
    int64_t started_ms = 0;  // the boot the last reading was of
  };
  // How many samples each sandbox keeps now. Caller holds mu_.
  size_t ShareLocked() const;
  void DropOldestLocked(Ring& ring, size_t keep);

  const size_t max_samples_;
  mutable std::mutex mu_;
  std::map<std::string, Ring> rings_;
  size_t total_ = 0;
};

}  // namespace bulkhead::core
