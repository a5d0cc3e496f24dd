#include "net/host_addresses.h"

#include <errno.h>
#include <ifaddrs.h>
#include <sys/socket.h>

#include <algorithm>

#include "common/unique_fd.h"

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

bool IsOwnAddress(const IpAddress& address) {
  sockaddr_storage storage;
  const socklen_t length = address.ToSockaddr(0, &storage);
  UniqueFd probe(::socket(storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe) return true;
  return ::bind(probe.get(), reinterpret_cast<const sockaddr*>(&storage), length) == 0 || errno != EADDRNOTAVAIL;
}

std::shared_ptr<const LocalHost> HostAddresses::Get() {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!current_ || now - read_at_ >= kRefresh) {
    current_ = std::make_shared<const LocalHost>(LocalHost{ReadHostAddresses(), listeners_, &IsOwnAddress});
    read_at_ = now;
  }
  return current_;
}

void HostAddresses::AddListener(const DaemonListener& listener) {
  std::lock_guard lock(mutex_);
  listeners_.push_back(listener);
  current_.reset();  // made again, with it, by the next Get
}

}  // namespace bulkhead::net
