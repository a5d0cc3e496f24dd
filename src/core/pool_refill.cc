// Warm pools (warm_pool.h): which pool a create takes from, fitting a pooled sandbox to the
// create's settings, and the thread that keeps every pool at its target.
#include <algorithm>
#include <spdlog/spdlog.h>

#include "common/ctl_protocol.h"
#include "core/ctl_client.h"
#include "core/manager_impl.h"
#include "core/spec_json.h"

namespace bulkhead::core {

std::optional<PoolKey> SandboxManagerImpl::PoolKeyFor(const SandboxSpec& spec) const {
  if (!spec.volumes.empty()) return std::nullopt;
  auto tier = tiers_.Find(spec.runtime);
  if (!tier || !(*tier)->capabilities().pooling) return std::nullopt;
  // Pooled sandboxes boot with the default limits and no network (Refill): where the tier
  // fixes those at boot (a guest's size, its NIC), only a create that keeps them takes one.
  if ((*tier)->BootShape(LimitsOf(spec)) != (*tier)->BootShape(LimitsOf(SandboxSpec{}))) return std::nullopt;
  if ((*tier)->capabilities().nic_from_boot && spec.network.mode != "none") return std::nullopt;
  return PoolKey{spec.runtime, spec.image, spec.from_snapshot.value_or("")};
}

std::optional<PoolKey> SandboxManagerImpl::MemoryPoolKey(const SandboxSpec& boot) const {
  // (A restore mounts the snapshot's volumes: one held ready would hold them.)
  if (!boot.from_snapshot || !boot.volumes.empty() || config_.WarmPool(boot.runtime) <= 0) return std::nullopt;
  auto tier = tiers_.Find(boot.runtime);
  if (!tier || !(*tier)->capabilities().pooling) return std::nullopt;
  return PoolKey{boot.runtime, boot.image, *boot.from_snapshot};
}

std::shared_ptr<Sandbox> SandboxManagerImpl::TakePooled(const SandboxSpec& spec) {
  const std::optional<PoolKey> key = PoolKeyFor(spec);
  return key ? TakePooled(*key) : nullptr;  // (no pool for such sandboxes)
}

std::shared_ptr<Sandbox> SandboxManagerImpl::TakePooled(const PoolKey& key) {
  std::shared_ptr<Sandbox> sb;
  {
    std::lock_guard lock(mu_);
    if (pools_.Target(key) == 0) {
      // A runtime's host-image pool not filled from the start fills from its first create.
      if (key.image != "host" || !key.snapshot.empty() || config_.WarmPool(key.tier) <= 0) return nullptr;
      (void)pools_.SetTarget(key, config_.WarmPool(key.tier));
    }
    if (auto taken = pools_.Take(key)) {
      sb = std::move(*taken);
      stats_.warm_pool_hits_total++;
    } else {
      stats_.warm_pool_misses_total++;
    }
  }
  wake_.notify_all();  // the pool refills
  return sb;
}

Status SandboxManagerImpl::FitPooled(Sandbox& sb, const SandboxSpec& spec) {
  PreviewAccess preview = spec.preview;
  Status st = sb.tier->Foreground(HostName(sb.info.id));
  if (st) st = IssuePreviewToken(preview);
  // It booted with its pool's limits and disk quota: only those the create changes are set
  // again (each call into a gVisor sandbox's init costs milliseconds of the create).
  const SandboxSpec& booted = sb.info.spec;
  const runtime::Limits limits = LimitsOf(spec);
  if (booted.cpus != spec.cpus || booted.memory_mb != spec.memory_mb || booted.pids != spec.pids) {
    if (st) st = sb.tier->SetLimits(HostName(sb.info.id), limits);
    if (st) st = SetLimitsInside(sb, limits);
  }
  if (st && booted.disk_mb != spec.disk_mb) st = storage_->SetLayerQuota(sb.info.id, spec.disk_mb);
  if (st) st = GrantSudo(sb, spec);
  if (!st) {
    spdlog::warn("warm pool: sandbox {}: {}", sb.info.id, st.error().message);
    (void)Teardown(sb);
    return st.error();
  }
  sb.info.spec = spec;
  sb.info.spec.preview = std::move(preview);
  sb.info.parent_snapshot = spec.from_snapshot;
  sb.info.created_at = NextCreatedAt();
  return {};
}

std::vector<std::shared_ptr<Sandbox>> SandboxManagerImpl::WarmSnapshotLocked(const PoolKey& key) {
  if (config_.WarmPool(key.tier) <= 0) return {};
  warm_snapshots_.erase(std::remove(warm_snapshots_.begin(), warm_snapshots_.end(), key), warm_snapshots_.end());
  warm_snapshots_.push_back(key);
  if (pools_.Target(key) == 0) (void)pools_.SetTarget(key, 1);
  std::vector<std::shared_ptr<Sandbox>> cold;
  while (warm_snapshots_.size() > kWarmSnapshots) {
    for (auto& sb : pools_.SetTarget(warm_snapshots_.front(), 0)) cold.push_back(std::move(sb));
    warm_snapshots_.pop_front();
  }
  return cold;
}

std::vector<std::shared_ptr<Sandbox>> SandboxManagerImpl::ColdSnapshotLocked(const std::string& snapshot_id) {
  std::vector<std::shared_ptr<Sandbox>> cold;
  for (auto it = warm_snapshots_.begin(); it != warm_snapshots_.end();) {
    if (it->snapshot != snapshot_id) {
      ++it;
      continue;
    }
    for (auto& sb : pools_.SetTarget(*it, 0)) cold.push_back(std::move(sb));
    it = warm_snapshots_.erase(it);
  }
  return cold;
}

void SandboxManagerImpl::PoolLoop() {
  while (!stopping_) {
    std::optional<PoolKey> key;
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_ || (key = pools_.NextToFill()); });
      if (stopping_) break;
    }
    if (key) Refill(*key);
  }
}

void SandboxManagerImpl::Refill(const PoolKey& key) {
  SandboxSpec spec;
  LayerSource source;
  bool memory = false;              // a memory snapshot's pool: restores held frozen
  std::shared_ptr<void> use_token;  // a snapshot's: not deleted under the launch
  if (!key.snapshot.empty()) {
    auto use = UseSnapshot(key.snapshot, /*refill=*/true);
    memory = use && !use->first.memory.empty();
    Result<SandboxSpec> settings = !use    ? Result<SandboxSpec>(use.error())
                                   : memory ? RestorableSpec(use->first, key.tier)
                                            : SpecFromJson(use->first.spec_json);
    if (!settings) {  // deleted meanwhile, or no longer restorable here: its pool goes
      std::lock_guard lock(mu_);
      (void)pools_.SetTarget(key, 0);
      return;
    }
    spec = *settings;
    spec.from_snapshot = key.snapshot;
    if (!memory) spec.volumes.clear();
    source = {key.snapshot, use->first.uid_base, memory ? storage_->MemoryDir(key.snapshot) : ""};
    use_token = std::move(use->second);
  }
  // Pooled sandboxes run with no network, no sudo users and no timeout until handed out; a
  // snapshot's with the default limits where the tier fixes them at boot (PoolKeyFor). A
  // memory snapshot's restore is launched as a create's would be (CreateFromSnapshot): its
  // guest's size and devices are the image's.
  if (auto tier = tiers_.Find(key.tier); !memory && tier && !(*tier)->BootShape(LimitsOf(spec)).empty()) {
    spec.cpus = SandboxSpec{}.cpus;
    spec.memory_mb = SandboxSpec{}.memory_mb;
  }
  spec.runtime = key.tier;
  spec.image = key.image;
  if (!memory) spec.network = {};
  spec.sudo_users.clear();
  spec.timeout_s = 0;
  auto sb = Launch(spec, source, /*background=*/true);
  if (sb) {
    // A new sandbox's first command is much slower than its next: the pool runs one before it
    // hands the sandbox out (a shell and dynamically linked programs, what most first commands
    // load; whatever the image lacks of them fails harmlessly). Native: its overlays' lookups,
    // its cgroups and init's spawn path start cold (the first `echo hi` took 2.2 ms, the next
    // 1.0). gVisor and a microvm: their own kernel's file caches start cold too, and a microvm's
    // first command in a new QEMU costs ~130 ms more under TCG, its code translated anew (a
    // memory snapshot's restore is warmed up too, its processes running on for that long).
    ctl::ExecMessage warm_up;
    warm_up.argv = {"/bin/sh", "-c", "exec /usr/bin/env true"};
    warm_up.cwd = "/";
    warm_up.user = "root";
    auto ran = CallInitBlocking(*(*sb)->init, ctl::kExec, ctl::Encode(warm_up), std::chrono::seconds(10), ctl::kExit);
    if (!ran) spdlog::warn("warm pool: sandbox {}: the warm-up command: {}", (*sb)->info.id, ran.error().message);
  }
  if (sb && memory) {
    // Then held frozen: a create that takes it thaws it, and its processes go on from where
    // they were (the clock of that moment given anew).
    if (Status held = SetFrozen(**sb, true); !held) {
      (void)Teardown(**sb);
      sb = held.error();
    }
  }
  if (sb) {
    (void)MoveTo(**sb, State::kPooled);
    if (auto st = db_->Put(RowOf(**sb)); !st) {
      (void)Teardown(**sb);
      sb = st.error();
    }
  }
  if (!sb) {
    spdlog::warn("warm pool ({} {} {}): {}", key.tier, key.image, key.snapshot, sb.error().message);
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::seconds(5), [&] { return stopping_.load(); });
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (pools_.Put(key, *sb)) return;
  }
  (void)Teardown(**sb);  // its pool went cold while it booted
}

}  // namespace bulkhead::core
