// ConfigureNetns: routes, nftables table and listeners of a sandbox's network namespace.
// Everything runs on one short-lived thread that setns()es into the namespace: the netlink
// sockets (rtnetlink, libnftables') and the listeners are then made there, and the daemon's
// other threads stay in the host's namespace.
#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "net/netns.h"
#include "net/nftables.h"
#include "net/open_link.h"

namespace bulkhead::net {
namespace {

constexpr int kListenBacklog = 1024;
constexpr char kWhere[] = "sandbox network namespace";

// allowlist and open. In nat_out, traffic to loopback stays as it is; DNS (any address, port
// 53) goes to the DNS listener and every other TCP connection to the proxy listener. The
// filter runs after the redirect, so it sees the rewritten destination: only packets to
// loopback pass, everything else (other UDP, QUIC, ICMP) is dropped and the sender gets
// EPERM. ("oif lo accept" alone would not do: the default routes make every packet leave
// through lo.) The eth0 rules only matter in open mode, the one mode with an eth0 (OpenLinks):
// UDP and ICMP to public IPv4 addresses leave through it, unless chain deny_out (the policy's
// deny entries, SetDenyEntries) drops them, and only answers come back in.
std::string TableRules() {
  std::string denied;
  for (const IpPrefix& prefix : AlwaysDeniedPrefixes(/*v6=*/false)) {
    denied += (denied.empty() ? "" : ", ") + prefix.ToString();
  }
  return std::string(R"(table inet bulkhead {
  chain nat_out {
    type nat hook output priority -100; policy accept;
    oif lo ip daddr 127.0.0.0/8 return
    oif lo ip6 daddr ::1 return
    meta l4proto { tcp, udp } th dport 53 redirect to :53
    meta l4proto tcp redirect to :1000
  }
  chain deny_out {
  }
  chain filter_out {
    type filter hook output priority 0; policy drop;
    oif lo ip daddr 127.0.0.0/8 accept
    oif lo ip6 daddr ::1 accept
    oifname ")") + kOpenLinkName + R"(" jump deny_out
    oifname ")" + kOpenLinkName + R"(" meta l4proto { udp, icmp } ip daddr != { )" + denied + R"( } accept
  }
  chain filter_in {
    type filter hook input priority 0; policy accept;
    iifname ")" + kOpenLinkName + R"(" ct state established,related accept
    iifname ")" + kOpenLinkName + R"(" drop
  }
}
)";
}
static_assert(kProxyPort == 1000 && kDnsPort == 53, "TableRules names the ports literally");

// Removing the table, alone or to replace it: the empty table in front makes the delete work
// whether or not it exists, and the whole program is one transaction.
constexpr char kDeleteTable[] = "table inet bulkhead {}\ndelete table inet bulkhead\n";

// Brings lo up if it is not, and answers its index.
Result<int> BringLoopbackUp() {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return SystemError("socket for lo", errno);
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return SystemError("get lo flags", errno);
  if (!(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return SystemError("bring lo up", errno);
  }
  if (::ioctl(s.get(), SIOCGIFINDEX, &ifr) != 0) return SystemError("get lo index", errno);
  return ifr.ifr_ifindex;
}

void AddAttribute(nlmsghdr* header, int type, const void* data, size_t size) {
  auto* attribute = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(header) + NLMSG_ALIGN(header->nlmsg_len));
  attribute->rta_type = static_cast<unsigned short>(type);
  attribute->rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
  std::memcpy(RTA_DATA(attribute), data, size);
  header->nlmsg_len = NLMSG_ALIGN(header->nlmsg_len) + RTA_ALIGN(attribute->rta_len);
}

// Adds (replacing) or deletes the default route of `family` over lo in the main table: the
// equivalent of `ip route replace default dev lo src 127.0.0.1` / `ip -6 route replace
// default dev lo` and their `ip route del`. Answers the errno of the kernel's refusal.
int ChangeDefaultRoute(int family, int lo_index, bool present) {
  UniqueFd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!nl) return errno;
  struct {
    nlmsghdr header;
    rtmsg route;
    char attributes[64];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  request.header.nlmsg_type = present ? RTM_NEWROUTE : RTM_DELROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | (present ? NLM_F_CREATE | NLM_F_REPLACE : 0);
  request.header.nlmsg_seq = 1;
  request.route.rtm_family = static_cast<unsigned char>(family);
  request.route.rtm_dst_len = 0;  // default
  request.route.rtm_table = RT_TABLE_MAIN;
  if (present) {
    request.route.rtm_protocol = RTPROT_BOOT;
    request.route.rtm_type = RTN_UNICAST;
    // No gateway: the destination is "on the link" (v4); v6 routes are always universe.
    request.route.rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
  } else {
    request.route.rtm_scope = RT_SCOPE_NOWHERE;  // delete: match any scope
  }
  AddAttribute(&request.header, RTA_OIF, &lo_index, sizeof(lo_index));
  if (present && family == AF_INET) {
    // Connections then come from 127.0.0.1, so the redirect to 127.0.0.1 needs no
    // route_localnet and the replies stay on loopback.
    in_addr source{htonl(INADDR_LOOPBACK)};
    AddAttribute(&request.header, RTA_PREFSRC, &source, sizeof(source));
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), &request, request.header.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0) {
    return errno;
  }
  alignas(nlmsghdr) char reply[4096];
  ssize_t n = ::recv(nl.get(), reply, sizeof(reply), 0);
  if (n < 0) return errno;
  auto* header = reinterpret_cast<nlmsghdr*>(reply);
  if (!NLMSG_OK(header, static_cast<unsigned>(n)) || header->nlmsg_type != NLMSG_ERROR ||
      header->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
    return EPROTO;
  }
  return -static_cast<nlmsgerr*>(NLMSG_DATA(header))->error;
}

// Brings the `inet bulkhead` table of the calling thread's namespace to the mode's. A fresh
// namespace (the sandbox-create path) gets a plain create. An existing table is deleted (and
// for allowlist/open re-made in the same transaction): correct whatever state it is in, but
// deleting costs the kernel an RCU grace period (several ms) when the netlink socket closes.
Status ApplyNftables(Mode mode) {
  auto tables = RunNft("list tables inet", kWhere);
  if (!tables.ok()) return tables.error();
  bool exists = ("\n" + *tables).find("\ntable inet bulkhead\n") != std::string::npos;
  std::string program;
  if (mode == Mode::kNone) {
    if (!exists) return {};
    program = kDeleteTable;
  } else {
    // "create" fails (and with it the transaction) if the table exists after all, rather than
    // add a second copy of the rules. (`create table X { ... }` would create the table but
    // silently drop the chains in its body: nft 1.0.6.)
    program = std::string(exists ? kDeleteTable : "create table inet bulkhead\n") + TableRules();
  }
  auto done = RunNft(program, kWhere);
  if (!done.ok()) return done.error();
  return {};
}

// A socket bound to loopback:port (and listening, for TCP). SO_REUSEPORT lets a
// re-configuration bind while the caller still holds the previous listeners (it closes them
// once it has the new ones; connections still queued on an old listener when it closes are
// reset), and a restarted daemon bind while connections of the old one linger in TIME_WAIT
// (SO_REUSEADDR says the latter for TCP too). Nothing in the sandbox can join the port group:
// ports below 1024 need a capability its root lacks in this namespace, and the group is
// per uid.
Result<UniqueFd> LoopbackSocket(int family, int type, uint16_t port) {
  UniqueFd fd(::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket", errno);
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    return SystemError("SO_REUSEPORT", errno);
  }
  if (type == SOCK_STREAM && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return SystemError("SO_REUSEADDR", errno);
  }
  int rc;
  if (family == AF_INET) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  } else {
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) {
      return SystemError("IPV6_V6ONLY", errno);
    }
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_port = htons(port);
    address.sin6_addr = in6addr_loopback;
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  }
  if (rc != 0) return SystemError("bind", errno);
  if (type == SOCK_STREAM && ::listen(fd.get(), kListenBacklog) != 0) return SystemError("listen", errno);
  return fd;
}

// True if the namespace has ::1 (IPv6 may be compiled out, disabled by sysctl or by boot
// option; then the v6 listeners and route are left out).
bool HasIpv6Loopback() {
  UniqueFd probe(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  return ::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

Status OpenListener(UniqueFd* out, int family, int type, uint16_t port, const char* what) {
  auto fd = LoopbackSocket(family, type, port);
  if (!fd.ok()) {
    return MakeError(ErrorCode::kInternal,
                     std::string(what) + " listener in sandbox network namespace: " + fd.error().message);
  }
  *out = std::move(*fd);
  return {};
}

// The mode's state, in an order that never opens more than it should on the way: for
// allowlist/open the listeners and the table exist before the routes that make them
// reachable; for none the routes go first.
Result<NetnsListeners> ConfigureCurrentNetns(Mode mode) {
  auto lo_index = BringLoopbackUp();
  if (!lo_index.ok()) return lo_index.error();

  if (mode == Mode::kNone) {
    for (int family : {AF_INET, AF_INET6}) {
      int err = ChangeDefaultRoute(family, *lo_index, false);
      // No such route (already none): ESRCH for v4, ENOENT for v6. EAFNOSUPPORT: no IPv6.
      bool absent = err == ESRCH || err == ENOENT || (family == AF_INET6 && err == EAFNOSUPPORT);
      if (err != 0 && !absent) {
        return SystemError("delete default route in sandbox network namespace", err);
      }
    }
    BH_TRY(ApplyNftables(Mode::kNone));
    return NetnsListeners{};
  }

  bool ipv6 = HasIpv6Loopback();
  NetnsListeners listeners;
  BH_TRY(OpenListener(&listeners.tcp4, AF_INET, SOCK_STREAM, kProxyPort, "proxy"));
  BH_TRY(OpenListener(&listeners.dns_udp4, AF_INET, SOCK_DGRAM, kDnsPort, "DNS"));
  BH_TRY(OpenListener(&listeners.dns_tcp4, AF_INET, SOCK_STREAM, kDnsPort, "DNS"));
  if (ipv6) {
    BH_TRY(OpenListener(&listeners.tcp6, AF_INET6, SOCK_STREAM, kProxyPort, "proxy"));
    BH_TRY(OpenListener(&listeners.dns_udp6, AF_INET6, SOCK_DGRAM, kDnsPort, "DNS"));
    BH_TRY(OpenListener(&listeners.dns_tcp6, AF_INET6, SOCK_STREAM, kDnsPort, "DNS"));
  }
  BH_TRY(ApplyNftables(mode));
  if (int err = ChangeDefaultRoute(AF_INET, *lo_index, true); err != 0) {
    return SystemError("add default route in sandbox network namespace", err);
  }
  if (ipv6) {
    if (int err = ChangeDefaultRoute(AF_INET6, *lo_index, true); err != 0) {
      return SystemError("add IPv6 default route in sandbox network namespace", err);
    }
  }
  return listeners;
}

}  // namespace

std::string DenyRules(const Policy& policy) {
  std::string program = "flush chain inet bulkhead deny_out\n";
  for (const AllowEntry& entry : policy.deny) {
    if (entry.kind != AllowEntry::Kind::kPrefix || entry.prefix.address.v6) continue;
    program += "add rule inet bulkhead deny_out ip daddr " + entry.prefix.ToString();
    if (entry.port) program += " udp dport " + std::to_string(*entry.port);
    program += " drop\n";
  }
  return program;
}

Status SetDenyEntries(int netns_fd, const Policy& policy) {
  return RunInNetns(netns_fd, [&]() -> Status {
    auto done = RunNft(DenyRules(policy), kWhere);
    return done.ok() ? Status() : done.error();
  });
}

Result<NetnsListeners> ConfigureNetns(int netns_fd, Mode mode) {
  NetnsListeners listeners;
  BH_TRY(RunInNetns(netns_fd, [&]() -> Status {
    auto made = ConfigureCurrentNetns(mode);
    if (!made) return made.error();
    listeners = std::move(*made);
    return {};
  }));
  return listeners;
}

}  // namespace bulkhead::net
