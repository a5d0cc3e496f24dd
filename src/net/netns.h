// A sandbox's network namespace as the daemon shapes it. The namespace is made by the runtime
// (clone with CLONE_NEWNET, as the host's root, so the sandbox's own root cannot change it);
// here it gets, for each network mode:
//   none       loopback only: no route anywhere (connect fails at once), no rules, no listeners.
//   allowlist  default routes (v4 and v6) over lo, and an nftables table `inet bulkhead` that
//   and open   redirects every TCP connection not to loopback to the egress proxy's listener
//              (kProxyPort), every UDP/TCP packet to port 53 to the DNS listener (kDnsPort), and
//              drops everything else that is not loopback (other UDP, QUIC, ICMP, raw IPv6).
// The listeners are sockets the daemon opens inside the namespace, so the proxy knows which
// sandbox a connection comes from by the socket that accepted it, and SO_ORIGINAL_DST works
// (the redirect happened in that namespace's conntrack).
// A namespace with a guest link (common/guest_link.h: a tap whose other side is the eth0 of a
// guest with its own kernel) gets the same for what the guest sends: its TCP to the proxy, its
// DNS to the resolver (both listening at the tap's address too), in open mode its UDP and ICMP
// forwarded out of eth0 under the same rules; nothing else of it gets anywhere. In mode none
// the tap is down.
#pragma once
#include <cstdint>
#include <functional>

#include "common/result.h"
#include "common/unique_fd.h"
#include "net/allow_rules.h"

namespace bulkhead::net {

// Loopback ports below 1024: nothing in the sandbox can bind them first (its root has no
// capabilities in this namespace, which belongs to the host's user namespace).
constexpr uint16_t kProxyPort = 1000;  // HTTP_PROXY=http://127.0.0.1:1000 and the transparent target
constexpr uint16_t kDnsPort = 53;      // resolv.conf: nameserver 127.0.0.1

// Sockets in the sandbox's namespace, non-blocking and close-on-exec. The v6 ones are left
// empty if the namespace has no ::1 (IPv6 disabled); then there is no v6 default route either.
struct NetnsListeners {
  UniqueFd tcp4, tcp6;  // listening on 127.0.0.1:kProxyPort and [::1]:kProxyPort
  UniqueFd dns_udp4, dns_udp6, dns_tcp4, dns_tcp6;  // bound to 127.0.0.1:53 / [::1]:53
};

// Brings the namespace to `mode`, idempotently, replacing what an earlier call set up (the
// nftables table is swapped in one transaction, so no packet sees a half-made rule set).
// For allowlist and open, answers fresh listeners; the caller closes the old ones (they share
// the ports with SO_REUSEPORT until then, so close them right after: connections still queued
// on an old listener when it closes are reset). (blocking: runs on a short-lived thread that
// setns()es into `netns_fd`; well under 1 ms on a fresh namespace, one kernel RCU grace
// period more, typically several ms, when an existing table is replaced or removed.)
Result<NetnsListeners> ConfigureNetns(int netns_fd, Mode mode);

// A Kubernetes pod's namespace (bulkhead-oci's egress policy): its CNI network stays as it is
// (interfaces, addresses, routes); every TCP connection the pod starts to an address not its
// own goes to the proxy's listener and every DNS packet to the resolver's, as in allowlist and
// open mode; everything else it starts is dropped. What others start toward it (the kubelet's
// probes, services, other pods) is answered. Answers the listeners. (blocking)
Result<NetnsListeners> ConfigurePodNetns(int netns_fd);

// Makes the namespace's UDP and ICMP out of eth0 (open mode) follow the policy's IPv4 address
// deny entries: what an entry names is dropped (with a port: UDP to that port), replacing the
// entries set before in one transaction. Name entries and IPv6 ones have nothing to do here
// (names are refused by the resolver; IPv6 UDP never leaves). The namespace must have been
// configured for allowlist or open. (blocking)
Status SetDenyEntries(int netns_fd, const Policy& policy);
// The nft program SetDenyEntries runs.
std::string DenyRules(const Policy& policy);

// Whether the namespace has a guest link (a NIC of a guest: common/guest_link.h). (blocking)
Result<bool> NetnsHasGuestLink(int netns_fd);

// A socket created inside the namespace (for the port proxy and port-forward: connecting to
// the sandbox's 127.0.0.1:PORT). SOCK_NONBLOCK | SOCK_CLOEXEC are added to `type`.
Result<UniqueFd> SocketInNetns(int netns_fd, int domain, int type);

// Runs `fn` on a short-lived thread that has entered the namespace: netlink sockets, sockets
// and /proc/sys/net it opens are that namespace's. (blocking)
Status RunInNetns(int netns_fd, const std::function<Status()>& fn);

}  // namespace bulkhead::net
