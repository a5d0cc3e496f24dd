#include "net/ip_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace bulkhead::net {
namespace {

constexpr std::array<uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

IpAddress V4(const uint8_t* four) {
  IpAddress a;
  std::memcpy(a.bytes.data(), four, 4);
  return a;
}

// A 16-byte IPv6 address, or the IPv4 address it carries if it is IPv4-mapped.
IpAddress V6OrMapped(const uint8_t* sixteen) {
  if (std::memcmp(sixteen, kMappedPrefix.data(), kMappedPrefix.size()) == 0) return V4(sixteen + 12);
  IpAddress a;
  a.v6 = true;
  std::memcpy(a.bytes.data(), sixteen, 16);
  return a;
}

// Digits only, no sign, no leading zero (but "0"), at most `max`.
std::optional<int> ParseSmallNumber(std::string_view text, int max) {
  if (text.empty() || text.size() > 3 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

}  // namespace

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  bool bracketed = false;
  if (!text.empty() && text.front() == '[') {
    if (text.size() < 2 || text.back() != ']') return std::nullopt;
    text = text.substr(1, text.size() - 2);
    bracketed = true;
  }
  // inet_pton wants a NUL-terminated string; no address is longer than 45 characters.
  if (text.empty() || text.size() > INET6_ADDRSTRLEN) return std::nullopt;
  char buffer[INET6_ADDRSTRLEN + 1];
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  if (std::memchr(buffer, '\0', text.size()) != nullptr) return std::nullopt;

  uint8_t raw[16];
  // glibc's inet_pton rejects leading zeros in IPv4 octets ("01.2.3.4") and short forms
  // ("1.2.3"), and has no zone ids ("fe80::1%eth0"): exactly the strictness wanted.
  if (!bracketed && ::inet_pton(AF_INET, buffer, raw) == 1) return V4(raw);
  if (::inet_pton(AF_INET6, buffer, raw) == 1) return V6OrMapped(raw);
  return std::nullopt;
}

IpAddress IpAddress::FromSockaddr(const sockaddr* sa) {
  if (sa != nullptr && sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return V4(reinterpret_cast<const uint8_t*>(&in->sin_addr));
  }
  if (sa != nullptr && sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return V6OrMapped(reinterpret_cast<const uint8_t*>(&in6->sin6_addr));
  }
  return IpAddress{};  // 0.0.0.0: never a destination anyone is allowed to reach
}

std::string IpAddress::ToString() const {
  char buffer[INET6_ADDRSTRLEN];
  if (::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buffer, sizeof buffer) == nullptr) return {};
  return buffer;
}

socklen_t IpAddress::ToSockaddr(uint16_t port, sockaddr_storage* out) const {
  std::memset(out, 0, sizeof *out);
  if (v6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(out);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    std::memcpy(&in6->sin6_addr, bytes.data(), 16);
    return sizeof(sockaddr_in6);
  }
  auto* in = reinterpret_cast<sockaddr_in*>(out);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  std::memcpy(&in->sin_addr, bytes.data(), 4);
  return sizeof(sockaddr_in);
}

namespace {

bool BitSet(const IpAddress& address, int bit) { return (address.bytes[bit / 8] & (0x80 >> (bit % 8))) != 0; }

std::optional<IpPrefix> ParsePrefix(std::string_view text, bool clear_host_bits) {
  if (text.find('[') != std::string_view::npos) return std::nullopt;  // brackets are the caller's
  size_t slash = text.find('/');
  auto address = IpAddress::Parse(text.substr(0, slash));
  if (!address) return std::nullopt;
  int max = address->v6 ? 128 : 32;
  IpPrefix prefix;
  prefix.address = *address;
  prefix.length = max;
  if (slash != std::string_view::npos) {
    std::string_view length_text = text.substr(slash + 1);
    bool mapped = !address->v6 && text.substr(0, slash).find(':') != std::string_view::npos;
    auto length = ParseSmallNumber(length_text, mapped ? 128 : max);
    if (!length) return std::nullopt;
    if (mapped) {
      // "::ffff:10.0.0.0/104" is 10.0.0.0/8; shorter would reach past the mapped range.
      if (*length < 96) return std::nullopt;
      *length -= 96;
    }
    prefix.length = *length;
  }
  for (int bit = prefix.length; bit < max; ++bit) {
    if (!BitSet(prefix.address, bit)) continue;
    if (!clear_host_bits) return std::nullopt;
    prefix.address.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  return prefix;
}

}  // namespace

// Host bits set is an error, not silently cleared: "10.0.0.1/8" is most likely a typo.
std::optional<IpPrefix> IpPrefix::Parse(std::string_view text) { return ParsePrefix(text, false); }

std::optional<IpPrefix> IpPrefix::ParseMasked(std::string_view text) { return ParsePrefix(text, true); }

bool IpPrefix::Contains(const IpAddress& a) const {
  if (a.v6 != address.v6) return false;
  int full = length / 8, rest = length % 8;
  if (std::memcmp(a.bytes.data(), address.bytes.data(), full) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a.bytes[full] & mask) == (address.bytes[full] & mask);
}

std::string IpPrefix::ToString() const { return address.ToString() + "/" + std::to_string(length); }

std::optional<std::vector<IpPrefix>> SubtractPrefixes(const IpPrefix& from, const std::vector<IpPrefix>& holes,
                                                      size_t max_count) {
  std::vector<IpPrefix> out;
  // Depth first, low half before high: a prefix no hole touches is kept whole, one a hole
  // covers is dropped, one a hole lies inside is split in two.
  std::vector<IpPrefix> pending = {from};
  while (!pending.empty()) {
    const IpPrefix prefix = pending.back();
    pending.pop_back();
    bool split = false, covered = false;
    for (const IpPrefix& hole : holes) {
      if (hole.address.v6 != prefix.address.v6) continue;
      if (hole.length <= prefix.length && hole.Contains(prefix.address)) {
        covered = true;
        break;
      }
      if (prefix.Contains(hole.address)) split = true;
    }
    if (covered) continue;
    if (!split) {
      if (out.size() == max_count) return std::nullopt;
      out.push_back(prefix);
      continue;
    }
    IpPrefix low{prefix.address, prefix.length + 1}, high = low;
    high.address.bytes[prefix.length / 8] |= static_cast<uint8_t>(0x80 >> (prefix.length % 8));
    pending.push_back(high);
    pending.push_back(low);
  }
  return out;
}

}  // namespace bulkhead::net
