// Open mode's way out for UDP and ICMP. TCP and DNS go through the egress proxy and resolver
// in every mode; open mode also gives the sandbox a veth pair to the daemon's namespace:
//   sandbox side  eth0, the .2 of a /30 from the daemon's open subnet; policy routing sends
//                 UDP (except port 53) and ICMP to table 100, whose default route leads to the
//                 host side; TCP and DNS keep the main table's route over lo (to the proxy and
//                 resolver). The sandbox's nftables table (netns.cc) passes UDP and ICMP out of
//                 eth0 to public IPv4 addresses only, and lets only answers back in. A ping
//                 socket works (ping_group_range covers every group).
//   host side     bh<tag><hash>, the .1; an nftables table `ip bulkhead_<tag>` masquerades the
//                 open subnet, forwards only UDP and ICMP from it to public addresses and only
//                 answers to it, and drops everything it sends to the host itself. ip_forward
//                 is switched on with the first link and back to what it was with the last
//                 (ip_forward.h: the last of every daemon's in the namespace).
// IPv6 UDP stays dropped in open mode: forwarding IPv6 would make the host ignore router
// advertisements. Address entries of an open policy re-open denied ranges for TCP only.
// The pair goes away with the sandbox's namespace; links a killed daemon left behind (same
// tag: one per state directory) are removed when the next one starts. The host table lives
// while there is a link: it goes with the last one (and a killed daemon's, at start).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"
#include "net/ip_address.h"
#include "net/ip_forward.h"

namespace bulkhead::net {

constexpr char kOpenLinkName[] = "eth0";  // the sandbox side's name

class OpenLinks {
 public:
  // `subnet`: an IPv4 prefix of length 8..28 whose /30s the links take; `tag`: 4 characters
  // naming this daemon's links and table. Removes the links a previous daemon with this tag
  // left.
  static Result<std::unique_ptr<OpenLinks>> Start(const IpPrefix& subnet, const std::string& tag);

  // Gives the sandbox whose network namespace is `netns_fd` its link, replacing one it has.
  // (blocking; a few ms)
  Status Add(const std::string& sandbox_id, int netns_fd);
  // Removes the sandbox's link and its routing rules (netns_fd -1: the namespace is gone, and
  // the link with it; only the address is freed). No error if there is none.
  Status Remove(const std::string& sandbox_id, int netns_fd);

 private:
  OpenLinks(const IpPrefix& subnet, std::string tag);
  std::string HostLinkName(const std::string& sandbox_id) const;
  Status PrepareHost();  // ip_forward and the host table, once
  Status DropHost();     // both, when no link is left (they are made again with the next)

  const IpPrefix subnet_;
  const std::string tag_;
  std::mutex mu_;
  bool host_ready_ = false;
  IpForwardClaim ip_forward_;
  std::map<std::string, uint32_t> block_;  // sandbox id -> index of its /30 in subnet_
};

}  // namespace bulkhead::net
