#include "net/open_link.h"

#include <ifaddrs.h>
#include <linux/fib_rules.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <netlink/route/rule.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <set>
#include <vector>

#include "common/read_file.h"
#include "net/allow_rules.h"
#include "net/netns.h"
#include "net/nftables.h"

namespace bulkhead::net {
namespace {

constexpr uint32_t kOpenTable = 100;  // the sandbox's routing table for UDP and ICMP
constexpr uint32_t kRuleDns = 100, kRuleUdp = 101, kRuleIcmp = 102;  // rule priorities

template <typename T, void (*Free)(T*)>
struct NlDeleter {
  void operator()(T* p) const { Free(p); }
};
using Sock = std::unique_ptr<nl_sock, NlDeleter<nl_sock, nl_socket_free>>;
using Link = std::unique_ptr<rtnl_link, NlDeleter<rtnl_link, rtnl_link_put>>;
using Addr = std::unique_ptr<rtnl_addr, NlDeleter<rtnl_addr, rtnl_addr_put>>;
using Route = std::unique_ptr<rtnl_route, NlDeleter<rtnl_route, rtnl_route_put>>;
using Rule = std::unique_ptr<rtnl_rule, NlDeleter<rtnl_rule, rtnl_rule_put>>;
using NlAddr = std::unique_ptr<nl_addr, NlDeleter<nl_addr, nl_addr_put>>;
using Cache = std::unique_ptr<nl_cache, NlDeleter<nl_cache, nl_cache_free>>;

Error NlError(const std::string& what, int err) {
  return MakeError(ErrorCode::kInternal, "open-mode link: " + what + ": " + ::nl_geterror(err));
}

// A route netlink socket in the calling thread's namespace.
Result<Sock> Connect() {
  Sock sock(::nl_socket_alloc());
  if (!sock) return MakeError(ErrorCode::kInternal, "open-mode link: cannot allocate a netlink socket");
  if (int err = ::nl_connect(sock.get(), NETLINK_ROUTE); err < 0) return NlError("netlink connect", err);
  return sock;
}

uint32_t V4(const IpAddress& a) {
  return (uint32_t{a.bytes[0]} << 24) | (uint32_t{a.bytes[1]} << 16) | (uint32_t{a.bytes[2]} << 8) | a.bytes[3];
}

NlAddr NlV4(uint32_t v, int prefix_length) {
  uint32_t network_order = htonl(v);
  NlAddr a(::nl_addr_build(AF_INET, &network_order, 4));
  if (a) ::nl_addr_set_prefixlen(a.get(), prefix_length);
  return a;
}

// The IPv4 addresses on any interface of the calling thread's namespace.
std::set<uint32_t> AddressesInUse() {
  std::set<uint32_t> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      out.insert(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr));
    }
  }
  ::freeifaddrs(list);
  return out;
}

Status DeleteLink(nl_sock* sock, const std::string& name) {
  Link link(::rtnl_link_alloc());
  if (!link) return MakeError(ErrorCode::kInternal, "open-mode link: out of memory");
  ::rtnl_link_set_name(link.get(), name.c_str());
  int err = ::rtnl_link_delete(sock, link.get());
  if (err < 0 && err != -NLE_NODEV && err != -NLE_OBJ_NOTFOUND) return NlError("delete " + name, err);
  return {};
}

Status AddAddress(nl_sock* sock, int ifindex, uint32_t address, int prefix_length) {
  Addr addr(::rtnl_addr_alloc());
  NlAddr local = NlV4(address, prefix_length);
  if (!addr || !local) return MakeError(ErrorCode::kInternal, "open-mode link: out of memory");
  ::rtnl_addr_set_ifindex(addr.get(), ifindex);
  if (int err = ::rtnl_addr_set_local(addr.get(), local.get()); err < 0) return NlError("address", err);
  if (int err = ::rtnl_addr_add(sock, addr.get(), 0); err < 0) return NlError("add address", err);
  return {};
}

// Deletes every rule with one of our priorities (there may be several copies of one: rules
// have no uniqueness).
void DeleteRules(nl_sock* sock) {
  for (uint32_t prio : {kRuleDns, kRuleUdp, kRuleIcmp}) {
    for (int i = 0; i < 16; ++i) {
      Rule rule(::rtnl_rule_alloc());
      if (!rule) return;
      ::rtnl_rule_set_family(rule.get(), AF_INET);
      ::rtnl_rule_set_prio(rule.get(), prio);
      if (::rtnl_rule_delete(sock, rule.get(), 0) < 0) break;
    }
  }
}

Status AddRule(nl_sock* sock, uint32_t prio, uint8_t protocol, uint16_t dport, uint32_t table) {
  Rule rule(::rtnl_rule_alloc());
  if (!rule) return MakeError(ErrorCode::kInternal, "open-mode link: out of memory");
  ::rtnl_rule_set_family(rule.get(), AF_INET);
  ::rtnl_rule_set_prio(rule.get(), prio);
  ::rtnl_rule_set_ipproto(rule.get(), protocol);
  if (dport != 0) ::rtnl_rule_set_dport(rule.get(), dport);
  ::rtnl_rule_set_table(rule.get(), table);
  ::rtnl_rule_set_action(rule.get(), FR_ACT_TO_TBL);
  if (int err = ::rtnl_rule_add(sock, rule.get(), NLM_F_CREATE); err < 0) return NlError("add routing rule", err);
  return {};
}

// In the sandbox's namespace: our rules out and any eth0 gone (a pair whose host side was
// lost some other way).
Status ClearSandboxSide() {
  auto sock = Connect();
  if (!sock) return sock.error();
  DeleteRules(sock->get());
  return DeleteLink(sock->get(), kOpenLinkName);
}

// In the sandbox's namespace, once the pair exists: eth0's address, up, the UDP/ICMP table
// and the rules that pick it.
Status ConfigureSandboxSide(uint32_t sandbox_address, uint32_t host_address) {
  auto sock = Connect();
  if (!sock) return sock.error();
  int ifindex = static_cast<int>(::if_nametoindex(kOpenLinkName));
  if (ifindex == 0) return SystemError("open-mode link: find eth0", errno);
  BH_TRY(AddAddress(sock->get(), ifindex, sandbox_address, 30));
  Link up(::rtnl_link_alloc()), existing(::rtnl_link_alloc());
  if (!up || !existing) return MakeError(ErrorCode::kInternal, "open-mode link: out of memory");
  ::rtnl_link_set_ifindex(existing.get(), ifindex);
  ::rtnl_link_set_flags(up.get(), IFF_UP);
  if (int err = ::rtnl_link_change(sock->get(), existing.get(), up.get(), 0); err < 0) {
    return NlError("bring eth0 up", err);
  }

  Route route(::rtnl_route_alloc());
  NlAddr any = NlV4(0, 0), gateway = NlV4(host_address, 32);
  rtnl_nexthop* hop = ::rtnl_route_nh_alloc();
  if (!route || !any || !gateway || !hop) {
    if (hop) ::rtnl_route_nh_free(hop);
    return MakeError(ErrorCode::kInternal, "open-mode link: out of memory");
  }
  ::rtnl_route_nh_set_ifindex(hop, ifindex);
  ::rtnl_route_nh_set_gateway(hop, gateway.get());
  ::rtnl_route_add_nexthop(route.get(), hop);  // the route owns it now
  ::rtnl_route_set_family(route.get(), AF_INET);
  ::rtnl_route_set_table(route.get(), kOpenTable);
  if (int err = ::rtnl_route_set_dst(route.get(), any.get()); err < 0) return NlError("route", err);
  if (int err = ::rtnl_route_add(sock->get(), route.get(), NLM_F_CREATE | NLM_F_REPLACE); err < 0) {
    return NlError("add route", err);
  }

  DeleteRules(sock->get());
  // DNS first: it keeps the main table (lo, where the resolver's redirect leads).
  BH_TRY(AddRule(sock->get(), kRuleDns, IPPROTO_UDP, 53, RT_TABLE_MAIN));
  BH_TRY(AddRule(sock->get(), kRuleUdp, IPPROTO_UDP, 0, kOpenTable));
  BH_TRY(AddRule(sock->get(), kRuleIcmp, IPPROTO_ICMP, 0, kOpenTable));
  // Unprivileged ICMP echo (ping sockets) for every group (sandbox ids map to host ids up to
  // 0xfe000000): the sandbox has no CAP_NET_RAW.
  return WriteSmallFile("/proc/sys/net/ipv4/ping_group_range", "0 4294967294");
}

std::string DeniedSet() {
  std::string out;
  for (const IpPrefix& prefix : AlwaysDeniedPrefixes(/*v6=*/false)) out += (out.empty() ? "" : ", ") + prefix.ToString();
  return out;
}

}  // namespace

OpenLinks::OpenLinks(const IpPrefix& subnet, std::string tag) : subnet_(subnet), tag_(std::move(tag)) {}

Result<std::unique_ptr<OpenLinks>> OpenLinks::Start(const IpPrefix& subnet, const std::string& tag) {
  if (subnet.address.v6 || subnet.length < 8 || subnet.length > 28) {
    return MakeError(ErrorCode::kInvalid, "the open subnet must be an IPv4 prefix of length 8 to 28, not " +
                                              subnet.ToString());
  }
  std::unique_ptr<OpenLinks> links(new OpenLinks(subnet, tag));
  auto sock = Connect();
  if (!sock) return sock.error();
  nl_cache* raw = nullptr;
  if (int err = ::rtnl_link_alloc_cache(sock->get(), AF_UNSPEC, &raw); err < 0) return NlError("list links", err);
  Cache cache(raw);
  std::vector<std::string> stale;
  std::string prefix = "bh" + tag;
  for (nl_object* o = ::nl_cache_get_first(cache.get()); o; o = ::nl_cache_get_next(o)) {
    const char* name = ::rtnl_link_get_name(reinterpret_cast<rtnl_link*>(o));
    if (name && std::string_view(name).starts_with(prefix)) stale.emplace_back(name);
  }
  for (const auto& name : stale) BH_TRY(DeleteLink(sock->get(), name));
  // A killed predecessor's table: made again with the first link (Recover re-adds those).
  BH_TRY(links->DropHost());
  // Its ip_forward claim, and those of other daemons here that were killed.
  BH_TRY(IpForwardClaim::RemoveStale());
  return links;
}

std::string OpenLinks::HostLinkName(const std::string& sandbox_id) const {
  // 15 characters at most (IFNAMSIZ): "bh", the tag, 9 hex digits of the id's hash.
  char hash[16];
  std::snprintf(hash, sizeof(hash), "%09zx", std::hash<std::string>{}(sandbox_id) & size_t{0xfffffffff});
  return "bh" + tag_ + hash;
}

Status OpenLinks::PrepareHost() {
  if (host_ready_) return {};
  BH_TRY(ip_forward_.Take());
  std::string table = "bulkhead_" + tag_, links = "\"bh" + tag_ + "*\"";
  std::string program = "table ip " + table + " {}\ndelete table ip " + table + "\n" +
                        "table ip " + table + " {\n"
                        "  chain forward {\n"
                        "    type filter hook forward priority 0; policy accept;\n"
                        "    iifname " + links + " ip daddr { " + DeniedSet() + " } drop\n"
                        "    iifname " + links + " meta l4proto { udp, icmp } accept\n"
                        "    iifname " + links + " drop\n"
                        "    oifname " + links + " ct state established,related accept\n"
                        "    oifname " + links + " drop\n"
                        "  }\n"
                        "  chain input {\n"
                        "    type filter hook input priority 0; policy accept;\n"
                        "    iifname " + links + " drop\n"
                        "  }\n"
                        "  chain postrouting {\n"
                        "    type nat hook postrouting priority 100; policy accept;\n"
                        "    ip saddr " + subnet_.ToString() + " oifname != " + links + " masquerade\n"
                        "  }\n"
                        "}\n";
  auto done = RunNft(program, "the daemon's network namespace");
  if (!done) return done.error();
  host_ready_ = true;
  return {};
}

Status OpenLinks::DropHost() {
  const std::string table = "bulkhead_" + tag_;
  // Declaring the table first makes the delete succeed whether or not it exists.
  auto done = RunNft("table ip " + table + " {}\ndelete table ip " + table + "\n", "the daemon's network namespace");
  if (!done) return done.error();
  host_ready_ = false;
  return ip_forward_.Release();
}

Status OpenLinks::Add(const std::string& sandbox_id, int netns_fd) {
  std::lock_guard lock(mu_);
  BH_TRY(PrepareHost());

  // The sandbox's /30: the one it has, else the lowest that no other sandbox has and no
  // interface here uses.
  const uint32_t base = V4(subnet_.address), blocks = (uint32_t{1} << (32 - subnet_.length)) / 4;
  auto found = block_.find(sandbox_id);
  uint32_t block = 0;
  if (found != block_.end()) {
    block = found->second;
  } else {
    std::set<uint32_t> taken;
    for (const auto& [id, b] : block_) taken.insert(b);
    std::set<uint32_t> in_use = AddressesInUse();
    while (block < blocks) {
      uint32_t first = base + 4 * block;
      bool used = taken.count(block) || in_use.lower_bound(first) != in_use.upper_bound(first + 3);
      if (!used) break;
      ++block;
    }
    if (block == blocks) {
      return MakeError(ErrorCode::kUnavailable, "no free address left in the open subnet " + subnet_.ToString());
    }
  }
  const uint32_t host_address = base + 4 * block + 1, sandbox_address = base + 4 * block + 2;

  auto sock = Connect();
  if (!sock) return sock.error();
  const std::string name = HostLinkName(sandbox_id);
  BH_TRY(DeleteLink(sock->get(), name));
  BH_TRY(RunInNetns(netns_fd, ClearSandboxSide));

  Link veth(::rtnl_link_veth_alloc());
  if (!veth) return MakeError(ErrorCode::kInternal, "open-mode link: out of memory");
  ::rtnl_link_set_name(veth.get(), name.c_str());
  ::rtnl_link_set_flags(veth.get(), IFF_UP);
  Link peer(::rtnl_link_veth_get_peer(veth.get()));
  ::rtnl_link_set_name(peer.get(), kOpenLinkName);
  ::rtnl_link_set_ns_fd(peer.get(), netns_fd);
  if (int err = ::rtnl_link_add(sock->get(), veth.get(), NLM_F_CREATE | NLM_F_EXCL); err < 0) {
    return NlError("create veth " + name, err);
  }
  block_[sandbox_id] = block;  // from here on Remove deletes what was made

  int host_index = static_cast<int>(::if_nametoindex(name.c_str()));
  if (host_index == 0) return SystemError("open-mode link: find " + name, errno);
  BH_TRY(AddAddress(sock->get(), host_index, host_address, 30));
  return RunInNetns(netns_fd, [&] { return ConfigureSandboxSide(sandbox_address, host_address); });
}

Status OpenLinks::Remove(const std::string& sandbox_id, int netns_fd) {
  std::lock_guard lock(mu_);
  if (!block_.erase(sandbox_id) && netns_fd < 0) return {};
  auto sock = Connect();
  if (!sock) return sock.error();
  BH_TRY(DeleteLink(sock->get(), HostLinkName(sandbox_id)));
  // The host table serves links only: without any, it would outlive the daemon for nothing.
  if (block_.empty() && host_ready_) BH_TRY(DropHost());
  if (netns_fd < 0) return {};
  return RunInNetns(netns_fd, ClearSandboxSide);
}

}  // namespace bulkhead::net
