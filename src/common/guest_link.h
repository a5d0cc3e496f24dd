// The network link of a sandbox with a kernel of its own (the microvm tier): a tap in the
// sandbox's network namespace on the host, the guest's eth0 on the other side. Every link has
// the same addresses (QEMU's user-mode network plan): each is alone in its own namespace.
// The namespace's side is the sandbox's gateway, where the egress proxy and the DNS resolver
// listen (net/netns.h); the guest reaches nothing else.
#pragma once

namespace bulkhead::guest_link {

inline constexpr char kTapName[] = "tap0";               // in the sandbox's network namespace
inline constexpr char kGuestName[] = "eth0";             // in the guest
inline constexpr char kGatewayAddress[] = "10.0.2.2";    // the tap's: HTTP_PROXY and resolv.conf
inline constexpr char kGuestAddress[] = "10.0.2.15";     // the guest's eth0
inline constexpr char kNetmask[] = "255.255.255.0";
// IPv6: unique local addresses in one /64, with no duplicate address detection on either side
// (nothing else is on the link; DAD would hold each address back for a second).
inline constexpr char kGatewayAddress6[] = "fd00:0:0:2::2";
inline constexpr char kGuestAddress6[] = "fd00:0:0:2::15";
inline constexpr int kPrefixLength6 = 64;
inline constexpr char kGuestMac[] = "52:54:00:12:34:56";

}  // namespace bulkhead::guest_link
