// The names a sandbox's DNS lookups were answered with, by address: how the transparent proxy
// names a connection made to an address without announcing a name (no SNI, no Host), and how
// it knows that address came from our resolver for an allowed name. Bounded in size; an entry
// lives as long as its record's TTL, but at least a minute (programs keep using an address a
// while after its TTL) and at most an hour. Thread-safe.
#pragma once
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "net/ip_address.h"

namespace bulkhead::net {

class AddressNames {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxEntries = 4096;
  static constexpr std::chrono::seconds kMinLifetime{60};
  static constexpr std::chrono::seconds kMaxLifetime{3600};

  // `name` (normalized) was answered with `address`, valid for `ttl` seconds.
  void Remember(const std::string& name, const IpAddress& address, uint32_t ttl, Clock::time_point now = Clock::now());
  // The names `address` was given for that have not expired, in name order.
  std::vector<std::string> Lookup(const IpAddress& address, Clock::time_point now = Clock::now());

 private:
  std::mutex mutex_;
  std::map<std::pair<IpAddress, std::string>, Clock::time_point> expiry_;
};

}  // namespace bulkhead::net
