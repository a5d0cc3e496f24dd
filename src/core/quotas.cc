// Tenants' quotas as the manager keeps and checks them (tenant_quota.h), and their egress rules
// (tenant_egress.h), kept the same way. A call that would add
// to a tenant's usage claims what it adds, under mu_, before it makes anything: a check sees
// the sandboxes listed and the claims of calls still making theirs, so concurrent creates of
// one tenant cannot pass its quota together. A claim ends when its call has listed what it
// made (or failed); for that moment its sandbox is counted twice, never not at all.
#include <spdlog/spdlog.h>

#include "core/manager_impl.h"

namespace bulkhead::core {
namespace {

// A tenant's entry of `map` set to `value`, or removed when it is empty (no quota, no rule).
template <typename Value>
void SetOrErase(std::map<std::string, Value>& map, const std::string& tenant, const Value& value) {
  if (value.Empty())
    map.erase(tenant);
  else
    map[tenant] = value;
}

constexpr int64_t kRateWindowMs = 60'000;

// Whether a sandbox holds the CPU and memory its quota counts: its processes are there.
bool Running(const Sandbox& sb) {
  return (sb.state == State::kStarting || sb.state == State::kRunning || sb.state == State::kPaused) && !sb.on_disk;
}

}  // namespace

Amounts NeedOf(const SandboxSpec& spec, int64_t count, bool create) {
  Amounts need;
  need[Resource::kSandboxes] = static_cast<double>(count);
  need[Resource::kCpus] = spec.cpus * static_cast<double>(count);
  need[Resource::kMemoryMb] = static_cast<double>(spec.memory_mb * count);
  if (create) {
    need[Resource::kDiskMb] = static_cast<double>(spec.disk_mb * count);
    need[Resource::kCreatesPerMinute] = static_cast<double>(count);
  }
  return need;
}

Status SandboxManagerImpl::LoadQuotas() {
  RecountImages();  // (what each tenant's images hold: from the image store, not the database)
  auto rows = db_->LoadTenantQuotas();
  if (!rows) return rows.error();
  std::lock_guard lock(mu_);
  for (const auto& [tenant, text] : *rows) {
    auto quota = PatchQuota({}, nlohmann::json::parse(text, nullptr, false));
    if (!quota) return MakeError(ErrorCode::kInternal, "tenant " + tenant + "'s stored quota: " + quota.error().message);
    quotas_[tenant] = *quota;
  }
  auto egress = db_->LoadTenantEgress();
  if (!egress) return egress.error();
  for (const auto& [tenant, text] : *egress) {
    auto rules = TenantEgressFromJson(nlohmann::json::parse(text, nullptr, false));
    if (!rules) return MakeError(ErrorCode::kInternal, "tenant " + tenant + "'s stored egress rules: " + rules.error().message);
    egress_rules_[tenant] = *rules;
  }
  return {};
}

Status SandboxManagerImpl::SetTenantEgress(const std::string& tenant, const TenantEgress& egress) {
  std::lock_guard write(quota_write_mu_);  // the row and the map change in the same order
  BH_TRY(db_->PutTenantEgress(tenant, TenantEgressToJson(egress).dump()));
  std::lock_guard lock(mu_);
  SetOrErase(egress_rules_, tenant, egress);
  return {};
}

TenantEgress SandboxManagerImpl::TenantEgressOf(const std::string& tenant) {
  if (tenant.empty()) return {};
  std::lock_guard lock(mu_);
  auto it = egress_rules_.find(tenant);
  return it == egress_rules_.end() ? TenantEgress{} : it->second;
}

Status SandboxManagerImpl::SetQuota(const std::string& tenant, const TenantQuota& quota) {
  std::lock_guard write(quota_write_mu_);  // the row and the map change in the same order
  BH_TRY(db_->PutTenantQuota(tenant, QuotaToJson(quota).dump()));
  std::lock_guard lock(mu_);
  SetOrErase(quotas_, tenant, quota);
  return {};
}

TenantQuota SandboxManagerImpl::Quota(const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = quotas_.find(tenant);
  return it == quotas_.end() ? TenantQuota{} : it->second;
}

std::map<std::string, Amounts> SandboxManagerImpl::UsageByTenant() {
  std::lock_guard lock(mu_);
  std::set<std::string> tenants;
  for (const auto& [name, quota] : quotas_) tenants.insert(name);
  for (const auto& [id, sb] : sandboxes_) tenants.insert(sb->info.spec.tenant);
  for (const auto& [id, entry] : snapshots_) tenants.insert(entry.info.tenant);
  for (const auto& [tenant, images] : tenant_images_) tenants.insert(tenant);
  tenants.merge(volumes_.Tenants());
  tenants.erase("");
  std::map<std::string, Amounts> out;
  const int64_t now = UnixMillis();
  for (const std::string& tenant : tenants) out[tenant] = UsageLocked(tenant, now);
  return out;
}

Amounts SandboxManagerImpl::UsageLocked(const std::string& tenant, int64_t now) {
  Amounts usage;
  for (const auto& [id, sb] : sandboxes_) {
    const SandboxSpec& spec = sb->info.spec;
    if (spec.tenant != tenant) continue;
    usage[Resource::kDiskMb] += static_cast<double>(spec.disk_mb);
    if (!Running(*sb)) continue;
    usage[Resource::kSandboxes] += 1;
    usage[Resource::kCpus] += spec.cpus;
    usage[Resource::kMemoryMb] += static_cast<double>(spec.memory_mb);
  }
  for (const auto& [id, entry] : snapshots_) {
    if (entry.info.tenant != tenant) continue;
    usage[Resource::kSnapshots] += 1;
    usage[Resource::kSnapshotBytes] += static_cast<double>(entry.info.size_bytes);
  }
  const auto [volumes, volume_mb] = volumes_.UsageOf(tenant);
  usage[Resource::kVolumes] += static_cast<double>(volumes);
  usage[Resource::kVolumeMb] += static_cast<double>(volume_mb);
  if (auto images = tenant_images_.find(tenant); images != tenant_images_.end()) {
    for (const auto& [name, bytes] : images->second) {
      usage[Resource::kImages] += 1;
      usage[Resource::kImageBytes] += static_cast<double>(bytes);
    }
  }
  for (const QuotaClaim& claim : claims_)
    if (claim.tenant == tenant)
      for (Resource r : kAllResources) usage[r] += claim.need[r];
  usage[Resource::kCreatesPerMinute] += static_cast<double>(CreatesLastMinuteLocked(tenant, now));
  return usage;
}

size_t SandboxManagerImpl::CreatesLastMinuteLocked(const std::string& tenant, int64_t now) {
  auto it = creates_.find(tenant);
  if (it == creates_.end()) return 0;
  std::deque<int64_t>& times = it->second;
  while (!times.empty() && times.front() <= now - kRateWindowMs) times.pop_front();
  const size_t count = times.size();
  if (count == 0) creates_.erase(it);
  return count;
}

Result<std::shared_ptr<void>> SandboxManagerImpl::ClaimCreatesLocked(const SandboxSpec& spec, int64_t count) {
  BH_TRY(RoomForLocked(count));
  return ClaimLocked(spec.tenant, NeedOf(spec, count, true));
}

Result<VolumeInfo> SandboxManagerImpl::CreateVolume(const storage::VolumeKey& key, int64_t size_mb) {
  Amounts need;
  need[Resource::kVolumes] = 1;
  need[Resource::kVolumeMb] = static_cast<double>(size_mb);
  std::shared_ptr<void> claim;
  {
    std::lock_guard lock(mu_);  // (then the registry's: never the other way round)
    auto claimed = ClaimLocked(key.tenant, need);
    if (!claimed) return claimed.error();
    claim = std::move(*claimed);
  }
  return volumes_.Create(key, size_mb);
}

void SandboxManagerImpl::RecountImages() {
  std::lock_guard recounting(recount_mu_);
  std::map<std::string, std::map<std::string, int64_t>> held;
  for (const ImageInfo& image : storage_->ListImages())
    for (const auto& [tenant, references] : image.tenants) held[tenant][image.name] = image.size_bytes;
  std::lock_guard lock(mu_);
  tenant_images_ = std::move(held);
}

std::map<std::string, int64_t> SandboxManagerImpl::ImagesHeldBy(const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = tenant_images_.find(tenant);
  return it == tenant_images_.end() ? std::map<std::string, int64_t>() : it->second;
}

Status SandboxManagerImpl::KeepImagesWithinQuota(const std::string& tenant,
                                                const std::map<std::string, int64_t>& before) {
  RecountImages();
  if (tenant.empty()) return {};
  std::vector<std::string> added;
  Status within;
  {
    std::lock_guard lock(mu_);
    auto quota = quotas_.find(tenant);
    if (quota == quotas_.end()) return {};
    // What it held before, and what the call added to it.
    Amounts need;
    for (const auto& [name, bytes] : tenant_images_[tenant]) {
      if (before.contains(name)) continue;
      added.push_back(name);
      need[Resource::kImages] += 1;
      need[Resource::kImageBytes] += static_cast<double>(bytes);
    }
    Amounts usage = UsageLocked(tenant, UnixMillis());
    for (Resource r : {Resource::kImages, Resource::kImageBytes}) usage[r] -= need[r];
    within = CheckQuota(tenant, quota->second, usage, need);
  }
  if (within.ok()) return {};
  for (const std::string& name : added) {
    if (Status released = DeleteImage(name, tenant); !released.ok())
      spdlog::warn("image {} past tenant {}'s quota is kept: {}", name, tenant, released.error().message);
  }
  return within;
}

Result<std::shared_ptr<void>> SandboxManagerImpl::ClaimLocked(const std::string& tenant, const Amounts& need) {
  if (tenant.empty()) return std::shared_ptr<void>();  // the host admin's: --max-sandboxes alone
  const int64_t now = UnixMillis();
  // A tenant without a quota costs a create no walk over every sandbox; its create times are
  // trimmed all the same.
  if (auto quota = quotas_.find(tenant); quota != quotas_.end())
    BH_TRY(CheckQuota(tenant, quota->second, UsageLocked(tenant, now), need));
  else
    CreatesLastMinuteLocked(tenant, now);
  // Creates are counted when asked for, made or not: the rate bounds the work they cost.
  for (int i = 0; i < static_cast<int>(need[Resource::kCreatesPerMinute]); ++i) creates_[tenant].push_back(now);
  QuotaClaim claim{tenant, need};
  claim.need[Resource::kCreatesPerMinute] = 0;
  auto it = claims_.insert(claims_.end(), std::move(claim));
  return std::shared_ptr<void>(nullptr, [this, it](void*) {
    std::lock_guard lock(mu_);
    claims_.erase(it);
  });
}

}  // namespace bulkhead::core
