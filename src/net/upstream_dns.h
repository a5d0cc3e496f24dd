// Questions to the upstream DNS servers (--dns-server, else the host's /etc/resolv.conf), from
// the daemon's own network namespace. Used to forward the sandboxes' allowed lookups and for
// the egress proxy's own A/AAAA lookups of the names it connects to.
// Each attempt uses a fresh random id and a fresh socket (a random source port), waits 2 s, and
// accepts only a reply from the server it asked with that id; every server is tried twice in
// turn. A truncated UDP reply is asked again over TCP when the caller can use a long answer.
#pragma once
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "net/ip_address.h"

namespace bulkhead::net {

struct DnsServer {
  IpAddress address;
  uint16_t port = 53;
  std::string ToString() const;  // "198.18.0.53:53", "[2001:db8::53]:53"
};

// "198.18.0.53", "198.18.0.53:5353", "2001:db8::53", "[2001:db8::53]:5353".
std::optional<DnsServer> ParseDnsServer(std::string_view text);
// The `nameserver` lines of a resolv.conf (entries that are not addresses are skipped).
std::vector<DnsServer> ResolvConfServers(std::string_view text);
// `configured` parsed, or when empty the nameservers of /etc/resolv.conf. An entry that is not
// an address is an error; no server at all is not (every lookup then fails: fail closed).
Result<std::vector<DnsServer>> UpstreamServers(const std::vector<std::string>& configured);

// Thread-safe; its coroutines run on the caller's executor (a strand).
class UpstreamDns {
 public:
  explicit UpstreamDns(std::vector<DnsServer> servers) : servers_(std::move(servers)) {}

  // Sends the DNS message `query` and answers the reply, carrying `query`'s own id again.
  // Replies with an error rcode are answers too; an error means no server answered.
  // `tcp_when_truncated`: a truncated UDP reply is asked again over TCP (a UDP client gets the
  // truncated reply instead, and asks again over TCP itself).
  boost::asio::awaitable<Result<std::string>> Exchange(std::string query, bool tcp_when_truncated);

  // The A and AAAA addresses of `name` (normalized), asked in parallel; empty if the name does
  // not exist or has none. Answers are cached for their TTL, at most 5 minutes.
  boost::asio::awaitable<Result<std::vector<IpAddress>>> Resolve(std::string name);

 private:
  struct Lookup;
  struct CacheEntry {
    std::vector<IpAddress> addresses;
    std::chrono::steady_clock::time_point expiry;
  };
  static constexpr size_t kMaxCacheEntries = 1024;

  boost::asio::awaitable<void> LookupAaaa(std::string name, std::shared_ptr<Lookup> lookup);
  std::optional<std::vector<IpAddress>> Cached(const std::string& name);
  void Cache(const std::string& name, const std::vector<IpAddress>& addresses, uint32_t ttl);

  const std::vector<DnsServer> servers_;
  std::mutex cache_mutex_;
  std::map<std::string, CacheEntry> cache_;
};

}  // namespace bulkhead::net
