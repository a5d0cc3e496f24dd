// The daemon host as the egress decisions see it (allow_rules.h LocalHost): its own addresses
// (getifaddrs of the daemon's network namespace), always denied as egress destinations unless
// an address rule allows them, and the daemon's own listeners, denied whatever the rules say.
// Addresses change rarely but do change (DHCP, a new interface), so they are read again at
// most every 5 s.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "net/allow_rules.h"
#include "net/ip_address.h"

namespace bulkhead::net {

// Every address of every interface, now.
std::vector<IpAddress> ReadHostAddresses();
// Whether `address` is one of this namespace's own now: a socket may bind to it. (Also true
// when that cannot be told, or with net.ipv4.ip_nonlocal_bind: the safe answer here.)
bool IsOwnAddress(const IpAddress& address);

// Thread-safe.
class HostAddresses {
 public:
  std::shared_ptr<const LocalHost> Get();
  // A socket the daemon listens on, from the next Get on.
  void AddListener(const DaemonListener& listener);

 private:
  static constexpr std::chrono::seconds kRefresh{5};
  std::mutex mutex_;
  std::vector<DaemonListener> listeners_;
  std::shared_ptr<const LocalHost> current_;
  std::chrono::steady_clock::time_point read_at_;
};

}  // namespace bulkhead::net
