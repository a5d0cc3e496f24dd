// The daemon host's own addresses (getifaddrs of the daemon's network namespace): always
// denied as egress destinations unless an address rule allows them (allow_rules.h). Addresses
// change rarely but do change (DHCP, a new interface), so they are read again at most every 5 s.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "net/ip_address.h"

namespace bulkhead::net {

// Every address of every interface, now.
std::vector<IpAddress> ReadHostAddresses();

// Thread-safe.
class HostAddresses {
 public:
  std::shared_ptr<const std::vector<IpAddress>> Get();

 private:
  static constexpr std::chrono::seconds kRefresh{5};
  std::mutex mutex_;
  std::shared_ptr<const std::vector<IpAddress>> current_;
  std::chrono::steady_clock::time_point read_at_;
};

}  // namespace bulkhead::net
