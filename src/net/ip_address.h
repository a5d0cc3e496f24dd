// IPv4 and IPv6 addresses and prefixes as values: parsing, printing, containment, subtraction.
// An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is treated as the IPv4 address it carries.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bulkhead::net {

struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // v4: the first 4 bytes

  // "1.2.3.4", "2001:db8::1", "[2001:db8::1]" (brackets allowed), "::ffff:1.2.3.4" (becomes v4).
  // No zone ids, no leading zeros in v4 octets ("01.2.3.4" is not an address).
  static std::optional<IpAddress> Parse(std::string_view text);
  static IpAddress FromSockaddr(const sockaddr* sa);  // AF_INET or AF_INET6 (mapped -> v4)
  std::string ToString() const;                       // canonical, no brackets
  // Fills `out` (sockaddr_in or sockaddr_in6) with this address and `port`; answers its length.
  socklen_t ToSockaddr(uint16_t port, sockaddr_storage* out) const;
  bool operator==(const IpAddress&) const = default;
  auto operator<=>(const IpAddress&) const = default;
};

struct IpPrefix {
  IpAddress address;  // host bits are zero
  int length = 0;     // 0..32 or 0..128

  // "10.0.0.0/8", "fd00::/8", or a bare address (a /32 or /128). Host bits set ("10.0.0.1/8")
  // is an error, so a typo cannot silently widen a rule.
  static std::optional<IpPrefix> Parse(std::string_view text);
  // As Parse, but host bits are cleared ("10.0.0.1/8" is 10.0.0.0/8), as Go's net.ParseCIDR
  // reads a CIDR: for rules written for E2B.
  static std::optional<IpPrefix> ParseMasked(std::string_view text);
  bool Contains(const IpAddress& a) const;
  std::string ToString() const;
};

// The addresses of `from` that none of `holes` holds, as the fewest prefixes, lowest first
// ("10.0.0.0/8" minus "10.0.0.5" is 23 prefixes). nullopt if that takes more than `max_count`.
std::optional<std::vector<IpPrefix>> SubtractPrefixes(const IpPrefix& from, const std::vector<IpPrefix>& holes,
                                                      size_t max_count);

}  // namespace bulkhead::net
