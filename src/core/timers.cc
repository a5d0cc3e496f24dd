// The timer thread: lifetimes (delete, pause or stop at the timeout), idle pauses, and the
// sampling of usage history.
#include <algorithm>
#include <spdlog/spdlog.h>

#include "core/manager_impl.h"

namespace bulkhead::core {

void SandboxManagerImpl::TimerLoop() {
  while (!stopping_) {
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping_.load(); });
    }
    if (stopping_) break;
    // To disk where the server says so and the sandbox's runtime can (--idle-pause disk).
    std::vector<std::string> expired, to_pause, to_pause_to_disk, to_stop;
    int64_t now = UnixMillis();
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, sb] : sandboxes_) {
        if (sb->deleting || sb->state != State::kRunning) continue;
        auto& pause = config_.idle_pause_to_disk && sb->tier->capabilities().memory_snapshot ? to_pause_to_disk
                                                                                               : to_pause;
        if (sb->expires_ms && sb->expires_ms <= now) {
          const std::string& action = sb->info.spec.on_timeout;
          (action == "pause" ? pause : action == "stop" ? to_stop : expired).push_back(id);
        } else if (sb->info.spec.idle_timeout_s > 0 && sb->busy == 0 &&
                   now - sb->last_activity_ms >= sb->info.spec.idle_timeout_s * 1000) {
          pause.push_back(id);
        }
      }
    }
    SampleUsage(now);
    if (config_.egress_keep_days > 0 && now - egress_pruned_ms_ >= kEgressPruneEveryMs) {
      egress_pruned_ms_ = now;
      auto pruned = db_->PruneEgress(now - config_.egress_keep_days * 24 * 3600 * 1000);
      if (!pruned) spdlog::warn("egress log: prune: {}", pruned.error().message);
      else if (*pruned > 0) spdlog::info("egress log: removed {} records older than {} days", *pruned, config_.egress_keep_days);
    }
    for (const auto& id : expired) {
      spdlog::info("sandbox {} reached its timeout; deleting it", id);
      (void)Delete(id);
    }
    for (const auto& id : to_stop) {
      spdlog::info("sandbox {} reached its timeout; stopping it", id);
      if (auto stopped = Stop(id); !stopped) spdlog::warn("sandbox {}: stop: {}", id, stopped.error().message);
    }
    for (const auto& id : to_pause) {
      spdlog::info("sandbox {} reached its timeout or idle timeout; pausing it", id);
      if (auto paused = Pause(id); !paused) spdlog::warn("sandbox {}: pause: {}", id, paused.error().message);
    }
    for (const auto& id : to_pause_to_disk) {
      spdlog::info("sandbox {} reached its timeout or idle timeout; pausing it to disk", id);
      if (auto paused = PauseToDisk(id); !paused) spdlog::warn("sandbox {}: pause: {}", id, paused.error().message);
    }
  }
}

void SandboxManagerImpl::SampleUsage(int64_t now) {
  struct Due {
    std::string id;
    runtime::Tier* tier;
    double cpus;
    int64_t started_ms;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(mu_);
    std::vector<Sandbox*> waiting;
    for (const auto& [id, sb] : sandboxes_) {
      if (!sb->deleting && sb->state == State::kRunning && sb->next_sample_ms <= now) waiting.push_back(sb.get());
    }
    const auto longest_waiting = [](const Sandbox* a, const Sandbox* b) { return a->next_sample_ms < b->next_sample_ms; };
    if (waiting.size() > kSamplesPerTick) {
      std::nth_element(waiting.begin(), waiting.begin() + kSamplesPerTick, waiting.end(), longest_waiting);
      waiting.resize(kSamplesPerTick);
    }
    for (Sandbox* sb : waiting) {
      sb->next_sample_ms = now + UsageHistory::kIntervalMs;
      due.push_back({sb->info.id, sb->tier, sb->info.spec.cpus, sb->booted_ms});
    }
  }
  for (const Due& d : due) RecordUsage(d.id, *d.tier, d.cpus, d.started_ms);
  if (now - usage_trimmed_ms_ >= UsageHistory::kIntervalMs) {
    usage_history_.Trim(now);
    usage_trimmed_ms_ = now;
  }
}

void SandboxManagerImpl::RecordUsage(const std::string& id, runtime::Tier& tier, double cpus, int64_t started_ms) {
  auto usage = tier.SandboxUsage(HostName(id));
  if (!usage) return;  // deleted or stopped meanwhile
  const int64_t now = UnixMillis();
  usage->disk_bytes = SampledDiskBytes(id, now);
  usage_history_.Record(id, now, *usage, cpus, started_ms);
}

int64_t SandboxManagerImpl::SampledDiskBytes(const std::string& id, int64_t now) {
  // The quota drivers read the figure from the filesystem's accounting; without quotas it is
  // a walk of the whole layer, which the sampler repeats at most once a minute per sandbox.
  constexpr int64_t kWalkIntervalMs = 60'000;
  const bool walk = !storage_->quotas_enforced();
  if (walk) {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return 0;
    if (now - sb->disk_measured_ms < kWalkIntervalMs) return sb->disk_bytes;
  }
  auto disk = storage_->LayerUsageBytes(id);
  const int64_t bytes = disk ? *disk : 0;
  if (walk) {
    std::lock_guard lock(mu_);
    if (auto sb = FindLocked(id)) {
      sb->disk_bytes = bytes;
      sb->disk_measured_ms = now;
    }
  }
  return bytes;
}

Result<std::vector<UsageSample>> SandboxManagerImpl::UsageSamples(const std::string& id, int64_t from_ms,
                                                                  int64_t to_ms) {
  runtime::Tier* tier = nullptr;
  double cpus = 0;
  int64_t started_ms = 0;
  bool sample_now = false;
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return NoSandbox(id);
    const int64_t now = UnixMillis();
    // Due and its turn has not come (many running), or just made: what it uses now is wanted
    // too. (One the timer is sampling now is not due, but may have no sample yet.)
    if (sb->state == State::kRunning && (sb->next_sample_ms <= now || usage_history_.LastSampleMs(id) == 0)) {
      sb->next_sample_ms = now + UsageHistory::kIntervalMs;
      tier = sb->tier;
      cpus = sb->info.spec.cpus;
      started_ms = sb->booted_ms;
      sample_now = true;
    }
  }
  if (sample_now) RecordUsage(id, *tier, cpus, started_ms);
  return usage_history_.Between(id, from_ms, to_ms);
}

}  // namespace bulkhead::core
