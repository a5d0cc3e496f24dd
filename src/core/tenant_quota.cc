#include "core/tenant_quota.h"

#include <cmath>

#include <fmt/format.h>

namespace bulkhead::core {
namespace {

constexpr std::array<ResourceName, kResources> kNames = {{
    {"sandboxes", "running sandboxes"},
    {"cpus", "CPUs of running sandboxes"},
    {"memory_mb", "MiB of memory of running sandboxes"},
    {"disk_mb", "MiB of disk of its sandboxes"},
    {"snapshots", "snapshots"},
    {"snapshot_bytes", "bytes of snapshots"},
    {"creates_per_minute", "sandboxes created in a minute"},
    {"volumes", "volumes"},
    {"volume_mb", "MiB of volumes"},
    {"images", "images"},
    {"image_bytes", "bytes of images"},
}};

// Whether a resource is counted in whole units (all but CPUs).
bool Whole(Resource r) { return r != Resource::kCpus; }

std::string Amount(Resource r, double value) {
  return Whole(r) ? fmt::format("{}", static_cast<int64_t>(value)) : fmt::format("{:g}", value);
}

Error Invalid(const std::string& what) { return MakeError(ErrorCode::kInvalid, what); }

}  // namespace

const ResourceName& NameOf(Resource resource) { return kNames[static_cast<size_t>(resource)]; }

bool TenantQuota::Empty() const {
  for (const auto& l : limit)
    if (l) return false;
  return true;
}

Status CheckQuota(const std::string& tenant, const TenantQuota& quota, const Amounts& usage, const Amounts& need) {
  for (Resource r : kAllResources) {
    if (need[r] <= 0 || !quota[r]) continue;
    // CPUs are fractions: a sum of tenths must not fail on rounding.
    if (usage[r] + need[r] <= *quota[r] + 1e-9) continue;
    return MakeError(ErrorCode::kTooMany,
                     fmt::format("tenant {} is at its quota \"{}\": {} {} (in use {}, this asks {} more)", tenant,
                                 NameOf(r).key, Amount(r, *quota[r]), NameOf(r).what, Amount(r, usage[r]),
                                 Amount(r, need[r])),
                     "quota_exceeded");
  }
  return {};
}

nlohmann::json QuotaToJson(const TenantQuota& quota) {
  nlohmann::json out = nlohmann::json::object();
  for (Resource r : kAllResources) {
    if (!quota[r]) continue;
    if (Whole(r))
      out[std::string(NameOf(r).key)] = static_cast<int64_t>(*quota[r]);
    else
      out[std::string(NameOf(r).key)] = *quota[r];
  }
  return out;
}

nlohmann::json AmountsToJson(const Amounts& amounts) {
  nlohmann::json out = nlohmann::json::object();
  for (Resource r : kAllResources) {
    if (Whole(r))
      out[std::string(NameOf(r).key)] = static_cast<int64_t>(amounts[r]);
    else
      out[std::string(NameOf(r).key)] = amounts[r];
  }
  return out;
}

Result<TenantQuota> PatchQuota(TenantQuota quota, const nlohmann::json& patch) {
  if (!patch.is_object()) return Invalid("\"quotas\" is an object of limits, e.g. {\"sandboxes\": 5}");
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const Resource* found = nullptr;
    for (const Resource& r : kAllResources)
      if (NameOf(r).key == it.key()) found = &r;
    if (!found) {
      std::string known;
      for (Resource r : kAllResources) known += (known.empty() ? "" : ", ") + std::string(NameOf(r).key);
      return Invalid("unknown quota \"" + it.key() + "\" (the quotas are " + known + ")");
    }
    const Resource r = *found;
    if (it.value().is_null()) {
      quota[r].reset();
      continue;
    }
    if (!it.value().is_number()) return Invalid("quota \"" + it.key() + "\" is a number, or null for none");
    const double value = it.value().get<double>();
    if (!std::isfinite(value) || value < 0 || value > kMaxLimit)
      return Invalid(fmt::format("quota \"{}\" is from 0 to {:g}", it.key(), kMaxLimit));
    if (Whole(r) && value != std::floor(value)) return Invalid("quota \"" + it.key() + "\" is a whole number");
    quota[r] = value;
  }
  return quota;
}

}  // namespace bulkhead::core
