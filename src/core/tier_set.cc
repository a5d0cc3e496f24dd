#include "core/tier_set.h"

namespace bulkhead::core {

void TierSet::Add(std::unique_ptr<runtime::Tier> tier) {
  const std::string name = tier->name();
  lacking_.erase(name);
  tiers_[name] = std::move(tier);
}

Result<runtime::Tier*> TierSet::Find(const std::string& name) const {
  if (auto it = tiers_.find(name); it != tiers_.end()) return it->second.get();
  auto why = lacking_.find(name);
  return MakeError(ErrorCode::kInvalid,
                   "runtime \"" + name + "\" is not available on this host: " +
                       (why != lacking_.end() ? why->second : "this daemon has no such tier"),
                   "runtime_unavailable");
}

std::vector<runtime::Tier*> TierSet::All() const {
  std::vector<runtime::Tier*> all;
  for (const auto& [name, tier] : tiers_) all.push_back(tier.get());
  return all;
}

std::vector<RuntimeInfo> TierSet::Describe() const {
  std::map<std::string, RuntimeInfo> all;
  for (const auto& [name, tier] : tiers_)
    all[name] = {name, true, "", tier->Details(), tier->capabilities().memory_snapshot};
  for (const auto& [name, why] : lacking_) all[name] = {name, false, why, {}};
  std::vector<RuntimeInfo> out;
  for (auto& [name, info] : all) out.push_back(std::move(info));
  return out;
}

std::string TierSet::WithMemorySnapshots() const {
  std::string names;
  for (const auto& [name, tier] : tiers_)
    if (tier->capabilities().memory_snapshot) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace bulkhead::core
