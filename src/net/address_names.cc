#include "net/address_names.h"

#include <algorithm>

namespace bulkhead::net {

void AddressNames::Remember(const std::string& name, const IpAddress& address, uint32_t ttl, Clock::time_point now) {
  const auto lifetime = std::clamp<std::chrono::seconds>(std::chrono::seconds(ttl), kMinLifetime, kMaxLifetime);
  const auto expiry = now + lifetime;
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(address, name);
  auto it = expiry_.find(key);
  if (it != expiry_.end()) {
    it->second = std::max(it->second, expiry);
    return;
  }
  if (expiry_.size() >= kMaxEntries) {
    std::erase_if(expiry_, [&](const auto& entry) { return entry.second <= now; });
  }
  if (expiry_.size() >= kMaxEntries) {
    // Still full of live entries: the one closest to expiring makes room.
    auto soonest = std::min_element(expiry_.begin(), expiry_.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
    expiry_.erase(soonest);
  }
  expiry_.emplace(std::move(key), expiry);
}

std::vector<std::string> AddressNames::Lookup(const IpAddress& address, Clock::time_point now) {
  std::vector<std::string> names;
  std::lock_guard lock(mutex_);
  for (auto it = expiry_.lower_bound(std::make_pair(address, std::string()));
       it != expiry_.end() && it->first.first == address;) {
    if (it->second <= now) {
      it = expiry_.erase(it);
      continue;
    }
    names.push_back(it->first.second);
    ++it;
  }
  return names;
}

}  // namespace bulkhead::net
