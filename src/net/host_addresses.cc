#include "net/host_addresses.h"

#include <ifaddrs.h>

#include <algorithm>

namespace bulkhead::net {

std::vector<IpAddress> ReadHostAddresses() {
  std::vector<IpAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    IpAddress address = IpAddress::FromSockaddr(entry->ifa_addr);
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
  }
  freeifaddrs(list);
  return out;
}

std::shared_ptr<const std::vector<IpAddress>> HostAddresses::Get() {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!current_ || now - read_at_ >= kRefresh) {
    current_ = std::make_shared<const std::vector<IpAddress>>(ReadHostAddresses());
    read_at_ = now;
  }
  return current_;
}

}  // namespace bulkhead::net
