// ConfigureNetns: routes, nftables table and listeners of a sandbox's network namespace.
// Everything runs on one short-lived thread that setns()es into the namespace: the netlink
// sockets (rtnetlink, libnftables') and the listeners are then made there, and the daemon's
// other threads stay in the host's namespace.
#include <arpa/inet.h>
#include <linux/fib_rules.h>
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

#include "common/guest_link.h"
#include "common/read_file.h"
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
//
// A namespace with a guest link (common/guest_link.h: the tap of a guest with its own kernel)
// gets the same for what arrives from the tap: nat_in sends the guest's DNS to the resolver
// and every TCP connection, IPv4 or IPv6, to the proxy (at the tap's address, where the
// listeners also take connections), filter_in lets in only those, answers and IPv6 neighbour
// discovery (the guest's way to the gateway's link address), chain forward lets the guest's UDP
// and ICMP out of eth0 under the same rules as above (open mode), and nat_post masquerades
// them behind eth0's address (the host's table then treats them as the sandbox's own).
std::string TableRules(bool has_guest_link) {
  std::string denied;
  for (const IpPrefix& prefix : AlwaysDeniedPrefixes(/*v6=*/false)) {
    denied += (denied.empty() ? "" : ", ") + prefix.ToString();
  }
  const std::string tap = std::string("\"") + guest_link::kTapName + "\"";
  const std::string eth0 = std::string("\"") + kOpenLinkName + "\"";
  const std::string guest_in = !has_guest_link ? "" : R"(
    iifname )" + tap + R"( meta l4proto tcp th dport 1000 accept
    iifname )" + tap + R"( meta l4proto { tcp, udp } th dport 53 accept
    iifname )" + tap + R"( ct state established,related accept
    iifname )" + tap + R"( icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept
    iifname )" + tap + R"( drop)";
  const std::string guest_out = !has_guest_link ? "" : R"(
    oifname )" + tap + R"( accept)";
  const std::string guest_chains = !has_guest_link ? "" : R"(
  chain nat_in {
    type nat hook prerouting priority -100; policy accept;
    iifname )" + tap + R"( meta l4proto { tcp, udp } th dport 53 redirect to :53
    iifname )" + tap + R"( meta l4proto tcp redirect to :1000
  }
  chain forward {
    type filter hook forward priority 0; policy drop;
    iifname )" + tap + " oifname " + eth0 + R"( jump deny_out
    iifname )" + tap + " oifname " + eth0 + R"( meta l4proto { udp, icmp } ip daddr != { )" + denied + R"( } accept
    iifname )" + eth0 + " oifname " + tap + R"( ct state established,related accept
  }
  chain nat_post {
    type nat hook postrouting priority 100; policy accept;
    oifname )" + eth0 + " ip saddr " + guest_link::kGuestAddress + R"( masquerade
  })";
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
    oifname ")" + kOpenLinkName + R"(" meta l4proto { udp, icmp } ip daddr != { )" + denied + R"( } accept)" +
         guest_out + R"(
  }
  chain filter_in {
    type filter hook input priority 0; policy accept;)" +
         guest_in + R"(
    iifname ")" + kOpenLinkName + R"(" ct state established,related accept
    iifname ")" + kOpenLinkName + R"(" drop
  })" + guest_chains + R"(
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

// Sends `header` on a fresh rtnetlink socket of the calling thread's namespace; answers the
// errno of the kernel's answer (0: done).
int SendAndAck(const nlmsghdr* header) {
  UniqueFd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!nl) return errno;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), header, header->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return errno;
  }
  alignas(nlmsghdr) char reply[4096];
  ssize_t n = ::recv(nl.get(), reply, sizeof(reply), 0);
  if (n < 0) return errno;
  auto* answer = reinterpret_cast<nlmsghdr*>(reply);
  if (!NLMSG_OK(answer, static_cast<unsigned>(n)) || answer->nlmsg_type != NLMSG_ERROR ||
      answer->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
    return EPROTO;
  }
  return -static_cast<nlmsgerr*>(NLMSG_DATA(answer))->error;
}

// Adds (replacing) or deletes the default route of `family` over lo in the main table: the
// equivalent of `ip route replace default dev lo src 127.0.0.1` / `ip -6 route replace
// default dev lo` and their `ip route del`. Answers the errno of the kernel's refusal.
int ChangeDefaultRoute(int family, int lo_index, bool present) {
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
  return SendAndAck(&request.header);
}

// A guest link's rule: whatever goes to the guest's subnet is routed by the main table (to
// the tap), ahead of open mode's rules that send UDP and ICMP to the open link (open_link.h):
// the resolver's answers and the guest's forwarded traffic coming back. `ip rule add to
// 10.0.2.0/24 lookup main priority 90`; 0 if it is there already.
int AddGuestRule() {
  struct {
    nlmsghdr header;
    fib_rule_hdr rule;
    char attributes[64];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(fib_rule_hdr));
  request.header.nlmsg_type = RTM_NEWRULE;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  request.header.nlmsg_seq = 1;
  request.rule.family = AF_INET;
  request.rule.dst_len = 24;
  request.rule.table = RT_TABLE_MAIN;
  request.rule.action = FR_ACT_TO_TBL;
  in_addr subnet{};
  ::inet_pton(AF_INET, guest_link::kGatewayAddress, &subnet);
  subnet.s_addr &= htonl(0xffffff00);  // guest_link::kNetmask
  AddAttribute(&request.header, FRA_DST, &subnet, sizeof(subnet));
  const uint32_t priority = 90;
  AddAttribute(&request.header, FRA_PRIORITY, &priority, sizeof(priority));
  const int err = SendAndAck(&request.header);
  return err == EEXIST ? 0 : err;
}

// Puts `rules` (a whole `table inet bulkhead`) in the calling thread's namespace in one
// transaction, replacing the table if it is there. A fresh namespace (the sandbox-create path)
// gets a plain create; deleting an existing table costs the kernel an RCU grace period
// (several ms) when the netlink socket closes. "create" fails (and with it the transaction) if
// the table exists after all, rather than add a second copy of the rules. (`create table X {
// ... }` would create the table but silently drop the chains in its body: nft 1.0.6.) Empty
// `rules`: the table removed.
Status InstallTable(const std::string& rules) {
  auto tables = RunNft("list tables inet", kWhere);
  if (!tables.ok()) return tables.error();
  const bool exists = ("\n" + *tables).find("\ntable inet bulkhead\n") != std::string::npos;
  std::string program = exists ? kDeleteTable : "";
  if (!rules.empty()) program += (exists ? "" : "create table inet bulkhead\n") + rules;
  if (program.empty()) return {};
  auto done = RunNft(program, kWhere);
  if (!done.ok()) return done.error();
  return {};
}

// The mode's table (none: no table).
Status ApplyNftables(Mode mode, bool has_guest_link) {
  return InstallTable(mode == Mode::kNone ? "" : TableRules(has_guest_link));
}

// A socket bound to loopback:port (and listening, for TCP). SO_REUSEPORT lets a
// re-configuration bind while the caller still holds the previous listeners (it closes them
// once it has the new ones; connections still queued on an old listener when it closes are
// reset), and a restarted daemon bind while connections of the old one linger in TIME_WAIT
// (SO_REUSEADDR says the latter for TCP too). Nothing in the sandbox can join the port group:
// ports below 1024 need a capability its root lacks in this namespace, and the group is
// per uid.
//
// With a guest link they take every local address (`any`): the guest reaches them at the tap's,
// where nat_in sends its connections.
Result<UniqueFd> LoopbackSocket(int family, int type, uint16_t port, bool any) {
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
    address.sin_addr.s_addr = htonl(any ? INADDR_ANY : INADDR_LOOPBACK);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  } else {
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) {
      return SystemError("IPV6_V6ONLY", errno);
    }
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_port = htons(port);
    address.sin6_addr = any ? in6addr_any : in6addr_loopback;
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

Status OpenListener(UniqueFd* out, int family, int type, uint16_t port, const char* what, bool any = false) {
  auto fd = LoopbackSocket(family, type, port, any);
  if (!fd.ok()) {
    return MakeError(ErrorCode::kInternal,
                     std::string(what) + " listener in sandbox network namespace: " + fd.error().message);
  }
  *out = std::move(*fd);
  return {};
}

bool HasGuestLink() { return ::if_nametoindex(guest_link::kTapName) != 0; }

// `ip -6 address replace fd00:0:0:2::2/64 dev tap0 nodad`: the gateway's IPv6 address on the
// guest link, without duplicate address detection (it would hold the address back for a
// second; the guest is the only other node). Answers the errno of the kernel's refusal.
int AddGatewayAddress6(int tap_index) {
  alignas(nlmsghdr) char request[NLMSG_SPACE(sizeof(ifaddrmsg)) + 2 * RTA_SPACE(sizeof(in6_addr))]{};
  auto* header = reinterpret_cast<nlmsghdr*>(request);
  header->nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  header->nlmsg_type = RTM_NEWADDR;
  header->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
  header->nlmsg_seq = 1;
  auto* message = static_cast<ifaddrmsg*>(NLMSG_DATA(header));
  message->ifa_family = AF_INET6;
  message->ifa_prefixlen = guest_link::kPrefixLength6;
  message->ifa_flags = IFA_F_NODAD;
  message->ifa_scope = RT_SCOPE_UNIVERSE;
  message->ifa_index = static_cast<unsigned>(tap_index);
  in6_addr address{};
  ::inet_pton(AF_INET6, guest_link::kGatewayAddress6, &address);
  AddAttribute(header, IFA_LOCAL, &address, sizeof address);
  AddAttribute(header, IFA_ADDRESS, &address, sizeof address);
  return SendAndAck(header);
}

// The guest link's side in this namespace: up with the gateway's addresses (IPv6 where the
// namespace has it), forwarding on (the guest's UDP and ICMP in open mode: chain forward
// decides what passes), or down with forwarding off (mode none: the guest's NIC then has no
// carrier).
Status SetGuestLink(bool up, bool ipv6) {
  if (!up) BH_TRY(WriteSmallFile("/proc/sys/net/ipv4/ip_forward", "0"));
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return SystemError("socket for the guest link", errno);
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, guest_link::kTapName, sizeof guest_link::kTapName);
  if (up) {
    auto set_address = [&](unsigned long request, const char* text, const char* what) -> Status {
      sockaddr_in address{};
      address.sin_family = AF_INET;
      ::inet_pton(AF_INET, text, &address.sin_addr);
      std::memcpy(&ifr.ifr_addr, &address, sizeof address);
      if (::ioctl(s.get(), request, &ifr) != 0) return SystemError(std::string("guest link ") + what, errno);
      return {};
    };
    BH_TRY(set_address(SIOCSIFADDR, guest_link::kGatewayAddress, "address"));
    BH_TRY(set_address(SIOCSIFNETMASK, guest_link::kNetmask, "netmask"));
    if (ipv6) {
      const int index = static_cast<int>(::if_nametoindex(guest_link::kTapName));
      if (int err = AddGatewayAddress6(index); err != 0) return SystemError("guest link IPv6 address", err);
    }
  }
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return SystemError("guest link flags", errno);
  ifr.ifr_flags = static_cast<short>(up ? ifr.ifr_flags | IFF_UP : ifr.ifr_flags & ~IFF_UP);
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return SystemError("guest link up or down", errno);
  if (up) {
    if (int err = AddGuestRule(); err != 0) return SystemError("guest link routing rule", err);
    BH_TRY(WriteSmallFile("/proc/sys/net/ipv4/ip_forward", "1"));
  }
  return {};
}

// The proxy's and the resolver's listeners, on loopback (`any`: every local address), v6 too
// where the namespace has ::1.
Status OpenListeners(NetnsListeners& listeners, bool ipv6, bool any) {
  BH_TRY(OpenListener(&listeners.tcp4, AF_INET, SOCK_STREAM, kProxyPort, "proxy", any));
  BH_TRY(OpenListener(&listeners.dns_udp4, AF_INET, SOCK_DGRAM, kDnsPort, "DNS", any));
  BH_TRY(OpenListener(&listeners.dns_tcp4, AF_INET, SOCK_STREAM, kDnsPort, "DNS", any));
  if (!ipv6) return {};
  BH_TRY(OpenListener(&listeners.tcp6, AF_INET6, SOCK_STREAM, kProxyPort, "proxy", any));
  BH_TRY(OpenListener(&listeners.dns_udp6, AF_INET6, SOCK_DGRAM, kDnsPort, "DNS", any));
  BH_TRY(OpenListener(&listeners.dns_tcp6, AF_INET6, SOCK_STREAM, kDnsPort, "DNS", any));
  return {};
}

// The mode's state, in an order that never opens more than it should on the way: for
// allowlist/open the listeners and the table exist before the routes (and the guest link)
// that make them reachable; for none the routes and the guest link go first.
Result<NetnsListeners> ConfigureCurrentNetns(Mode mode) {
  auto lo_index = BringLoopbackUp();
  if (!lo_index.ok()) return lo_index.error();
  const bool guest = HasGuestLink();

  if (mode == Mode::kNone) {
    if (guest) BH_TRY(SetGuestLink(false, false));
    for (int family : {AF_INET, AF_INET6}) {
      int err = ChangeDefaultRoute(family, *lo_index, false);
      // No such route (already none): ESRCH for v4, ENOENT for v6. EAFNOSUPPORT: no IPv6.
      bool absent = err == ESRCH || err == ENOENT || (family == AF_INET6 && err == EAFNOSUPPORT);
      if (err != 0 && !absent) {
        return SystemError("delete default route in sandbox network namespace", err);
      }
    }
    BH_TRY(ApplyNftables(Mode::kNone, guest));
    return NetnsListeners{};
  }

  bool ipv6 = HasIpv6Loopback();
  NetnsListeners listeners;
  BH_TRY(OpenListeners(listeners, ipv6, guest));
  BH_TRY(ApplyNftables(mode, guest));
  if (int err = ChangeDefaultRoute(AF_INET, *lo_index, true); err != 0) {
    return SystemError("add default route in sandbox network namespace", err);
  }
  if (ipv6) {
    if (int err = ChangeDefaultRoute(AF_INET6, *lo_index, true); err != 0) {
      return SystemError("add IPv6 default route in sandbox network namespace", err);
    }
  }
  if (guest) BH_TRY(SetGuestLink(true, ipv6));
  return listeners;
}

// A pod's table (ConfigurePodNetns): the redirects of TableRules without its routes or links;
// what others start toward the pod, and what it sends its own addresses, passes.
constexpr char kPodTableRules[] = R"(table inet bulkhead {
  chain nat_out {
    type nat hook output priority -100; policy accept;
    fib daddr type local return
    meta l4proto { tcp, udp } th dport 53 redirect to :53
    meta l4proto tcp redirect to :1000
  }
  chain filter_out {
    type filter hook output priority 0; policy drop;
    oif lo accept
    fib daddr type local accept
    ct state established,related accept
  }
}
)";

}  // namespace

Result<NetnsListeners> ConfigurePodNetns(int netns_fd) {
  NetnsListeners listeners;
  BH_TRY(RunInNetns(netns_fd, [&]() -> Status {
    auto lo_index = BringLoopbackUp();
    if (!lo_index.ok()) return lo_index.error();
    BH_TRY(OpenListeners(listeners, HasIpv6Loopback(), /*any=*/false));
    return InstallTable(kPodTableRules);
  }));
  return listeners;
}

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

Result<bool> NetnsHasGuestLink(int netns_fd) {
  bool found = false;
  BH_TRY(RunInNetns(netns_fd, [&]() -> Status {
    found = HasGuestLink();
    return {};
  }));
  return found;
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
