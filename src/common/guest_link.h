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
inline constexpr char kGuestMac[] = "52:54:00:12:34:56";

}  // namespace bulkhead::guest_link
