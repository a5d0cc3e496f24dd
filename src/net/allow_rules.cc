#include "net/allow_rules.h"

#include <algorithm>
#include <cstdio>

namespace bulkhead::net {
namespace {

constexpr size_t kMaxEntries = 1000;
constexpr size_t kMaxNameLength = 253;
constexpr size_t kMaxLabelLength = 63;
constexpr size_t kMaxQuotedLength = 80;

// `text` in double quotes for a message: printable ASCII kept, the rest as \xNN, long texts
// cut, so an error or log line never carries control characters or invalid UTF-8.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == kMaxQuotedLength) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c > 0x7e) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Error EntryError(std::string_view text, const std::string& problem) {
  return MakeError(ErrorCode::kInvalid, Quote(text) + ": " + problem);
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Why `name` (lower case, no trailing dot) is not a host name, or "" if it is one.
std::string NameProblem(std::string_view name) {
  if (name.empty()) return "the name is empty";
  if (name.size() > kMaxNameLength) return "a name is at most 253 characters";
  size_t start = 0;
  std::string_view last;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view label = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty()) return "a name has no empty labels (\"..\", or a dot at the start)";
    if (label.size() > kMaxLabelLength) return "a label (the part between dots) is at most 63 characters";
    for (char c : label) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (!ok) return "a name has only letters, digits, '-' and '_' between its dots";
    }
    last = label;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // No top-level domain is numeric; "1.2.3.4" is an address, "1.2.3" or "4" nothing valid.
  if (IsDigits(last)) return "the last label is a number: not a host name (write addresses as 1.2.3.4 or 10.0.0.0/8)";
  return {};
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool PortMatches(const AllowEntry& entry, uint16_t port, bool zero_is_any) {
  if (!entry.port) return true;
  return *entry.port == port || (zero_is_any && port == 0);
}

bool NameMatches(const AllowEntry& entry, std::string_view name) {
  if (entry.kind == AllowEntry::Kind::kName) return name == entry.name;
  if (entry.kind == AllowEntry::Kind::kSuffix) {
    // "a.example.com" ends with ".example.com"; "example.com" and "badexample.com" do not.
    return name.size() > entry.name.size() + 1 && name.ends_with(entry.name) &&
           name[name.size() - entry.name.size() - 1] == '.';
  }
  return false;
}

// The first of `entries` that names `name` (a kName/kSuffix entry) on `port`, or null.
const AllowEntry* NameEntry(const std::vector<AllowEntry>& entries, std::string_view name, uint16_t port,
                            bool zero_is_any) {
  auto found = std::find_if(entries.begin(), entries.end(), [&](const AllowEntry& entry) {
    return NameMatches(entry, name) && PortMatches(entry, port, zero_is_any);
  });
  return found == entries.end() ? nullptr : &*found;
}

// The first kPrefix entry of `entries` that contains `address` on `port`, or null.
const AllowEntry* AddressEntry(const std::vector<AllowEntry>& entries, const IpAddress& address, uint16_t port,
                               bool zero_is_any) {
  auto found = std::find_if(entries.begin(), entries.end(), [&](const AllowEntry& entry) {
    return entry.kind == AllowEntry::Kind::kPrefix && entry.prefix.Contains(address) &&
           PortMatches(entry, port, zero_is_any);
  });
  return found == entries.end() ? nullptr : &*found;
}

std::string DeniedBy(const std::string& what, const AllowEntry& entry) {
  return what + " is denied by deny entry " + Quote(entry.text);
}

struct DeniedRange {
  IpPrefix prefix;
  const char* what;
};

IpPrefix Prefix(const char* text) { return *IpPrefix::Parse(text); }

const std::vector<DeniedRange>& DeniedV4() {
  static const std::vector<DeniedRange> ranges = {
      {Prefix("0.0.0.0/8"), "\"this network\""},
      {Prefix("127.0.0.0/8"), "loopback"},
      {Prefix("10.0.0.0/8"), "private network"},
      {Prefix("172.16.0.0/12"), "private network"},
      {Prefix("192.168.0.0/16"), "private network"},
      {Prefix("100.64.0.0/10"), "carrier-grade NAT"},
      {Prefix("169.254.0.0/16"), "link-local and cloud metadata"},
      {Prefix("192.0.0.0/24"), "IETF protocol assignments"},
      {Prefix("224.0.0.0/3"), "multicast, reserved and broadcast"},
  };
  return ranges;
}

const std::vector<DeniedRange>& DeniedV6() {
  static const std::vector<DeniedRange> ranges = {
      {Prefix("::/128"), "unspecified address"},
      {Prefix("::1/128"), "loopback"},
      {Prefix("fe80::/10"), "link-local"},
      {Prefix("fc00::/7"), "unique local and cloud metadata"},
      {Prefix("fec0::/10"), "site-local"},
      {Prefix("ff00::/8"), "multicast"},
      {Prefix("64:ff9b:1::/48"), "local-use NAT64"},
      {Prefix("2001::/32"), "Teredo"},
  };
  return ranges;
}

IpAddress V4From(const uint8_t* four) {
  IpAddress a;
  std::copy(four, four + 4, a.bytes.begin());
  return a;
}

std::string HostAddress(const IpAddress& address, const std::vector<IpAddress>& host_addresses) {
  for (const auto& host : host_addresses) {
    if (host == address) return "the host's own address " + address.ToString();
  }
  return {};
}

// "<range> (<what>)" if the IPv4 `address` is always denied, else "".
std::string DeniedV4RangeOf(const IpAddress& address, const std::vector<IpAddress>& host_addresses) {
  std::string host = HostAddress(address, host_addresses);
  if (!host.empty()) return host;
  for (const auto& range : DeniedV4()) {
    if (range.prefix.Contains(address)) return range.prefix.ToString() + " (" + range.what + ")";
  }
  return {};
}

// A hand-made IpAddress may hold a mapped address as v6: the IPv4 address it carries, else
// `address` itself. (IpPrefix::Parse would turn "::ffff:0:0/96" into 0.0.0.0/0, hence the bytes.)
IpAddress Unmapped(const IpAddress& address) {
  static const std::array<uint8_t, 12> mapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (address.v6 && std::equal(mapped.begin(), mapped.end(), address.bytes.begin())) {
    return V4From(address.bytes.data() + 12);
  }
  return address;
}

// Which always-denied range `address` is in, described for a reason; "" if none.
std::string DeniedRangeOf(const IpAddress& given, const std::vector<IpAddress>& host_addresses) {
  const IpAddress address = Unmapped(given);
  if (!address.v6) return DeniedV4RangeOf(address, host_addresses);
  std::string host = HostAddress(address, host_addresses);
  if (!host.empty()) return host;
  for (const auto& range : DeniedV6()) {
    if (range.prefix.Contains(address)) return range.prefix.ToString() + " (" + range.what + ")";
  }
  // NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::) lead to the IPv4 address inside.
  static const IpPrefix nat64 = Prefix("64:ff9b::/96");
  static const IpPrefix six_to_four = Prefix("2002::/16");
  if (nat64.Contains(address)) {
    std::string inner = DeniedV4RangeOf(V4From(address.bytes.data() + 12), host_addresses);
    if (!inner.empty()) return "64:ff9b::/96 embedding " + inner;
  }
  if (six_to_four.Contains(address)) {
    std::string inner = DeniedV4RangeOf(V4From(address.bytes.data() + 2), host_addresses);
    if (!inner.empty()) return "2002::/16 embedding " + inner;
  }
  return {};
}

bool IsUnspecified(const IpAddress& address) {
  const size_t size = address.v6 ? 16 : 4;
  return std::all_of(address.bytes.begin(), address.bytes.begin() + size, [](uint8_t b) { return b == 0; });
}

// Whether a connection to `address` stays on the daemon's host: loopback, "this network"
// (0.0.0.0 connects to loopback), the unspecified address, or one of the host's addresses.
bool IsLocal(const IpAddress& address, const LocalHost& host) {
  static const IpPrefix loopback = Prefix("127.0.0.0/8"), this_network = Prefix("0.0.0.0/8");
  static const IpPrefix loopback6 = Prefix("::1/128");
  if (loopback.Contains(address) || this_network.Contains(address) || loopback6.Contains(address) ||
      IsUnspecified(address)) {
    return true;
  }
  if (std::find(host.addresses.begin(), host.addresses.end(), address) != host.addresses.end()) return true;
  return host.is_own != nullptr && host.is_own(address);
}

std::string HostPort(const IpAddress& address, uint16_t port) {
  std::string host = address.v6 ? "[" + address.ToString() + "]" : address.ToString();
  return host + ":" + std::to_string(port);
}

}  // namespace

std::optional<Mode> ParseMode(std::string_view text) {
  if (text == "none") return Mode::kNone;
  if (text == "allowlist") return Mode::kAllowlist;
  if (text == "open") return Mode::kOpen;
  return std::nullopt;
}

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kNone:
      return "none";
    case Mode::kAllowlist:
      return "allowlist";
    case Mode::kOpen:
      return "open";
  }
  return "none";
}

Result<AllowEntry> ParseAllowEntry(std::string_view text) {
  AllowEntry entry;
  entry.text = std::string(text);
  if (text.empty()) return EntryError(text, "an entry is empty");
  if (text.size() > kMaxNameLength + 8) return EntryError(text, "an entry is at most 261 characters");

  // Split off the port. IPv6 takes brackets to carry one: "[2001:db8::1]:443".
  std::string_view host = text;
  std::optional<std::string_view> port_text;
  bool bracketed = false;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return EntryError(text, "'[' without a closing ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return EntryError(text, "after ']' only \":port\" may follow");
      port_text = rest.substr(1);
    }
    bracketed = true;
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    size_t colon = text.find(':');
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (port_text) {
    auto port = ParsePort(*port_text);
    if (!port) return EntryError(text, "the port must be a number from 1 to 65535");
    entry.port = *port;
  }
  if (host.empty()) return EntryError(text, "a name or address is needed before the port");

  // An address or prefix: anything in brackets, with ':' (IPv6), with '/', or only digits and dots.
  bool addressy = bracketed || host.find(':') != std::string_view::npos || host.find('/') != std::string_view::npos ||
                  std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
  if (addressy) {
    auto prefix = IpPrefix::Parse(host);
    if (!prefix) {
      size_t slash = host.find('/');
      auto address = IpAddress::Parse(host.substr(0, slash));
      if (address && slash != std::string_view::npos) {
        return EntryError(text, "not a valid prefix: the length must be 0..32 (IPv4) or 0..128 (IPv6) and the "
                                "address must have no bits set past it (e.g. 10.0.0.0/8, not 10.0.0.1/8)");
      }
      if (host.find(':') != std::string_view::npos && !bracketed) {
        return EntryError(text, "not a valid address; an IPv6 address with a port takes brackets: [2001:db8::1]:443");
      }
      return EntryError(text, "not a valid IP address or prefix (e.g. 1.2.3.4, 10.0.0.0/8, 2001:db8::1, fd00::/8)");
    }
    if (bracketed && !prefix->address.v6) {
      return EntryError(text, "brackets are only for IPv6 addresses: write 1.2.3.4:443");
    }
    entry.kind = AllowEntry::Kind::kPrefix;
    entry.prefix = *prefix;
    return entry;
  }

  std::string name = Lower(host);
  if (name == "*" || name == "*.") {
    return EntryError(text, "a lone wildcard would allow every name: use mode open, or a suffix like *.example.com");
  }
  if (name.starts_with("*.")) {
    entry.kind = AllowEntry::Kind::kSuffix;
    name.erase(0, 2);
    if (name.empty() || name == ".") {
      return EntryError(text, "a wildcard needs a domain after \"*.\" (e.g. *.example.com)");
    }
  } else {
    entry.kind = AllowEntry::Kind::kName;
  }
  if (name.find('*') != std::string::npos) {
    return EntryError(text, "'*' is only allowed as the whole first label, as in *.example.com");
  }
  if (name.ends_with('.')) name.pop_back();
  std::string problem = NameProblem(name);
  if (!problem.empty()) return EntryError(text, problem);
  entry.name = std::move(name);
  return entry;
}

Result<Policy> ParsePolicy(std::string_view mode, const std::vector<std::string>& allow,
                           const std::vector<std::string>& deny) {
  Policy policy;
  auto parsed_mode = ParseMode(mode);
  if (!parsed_mode) {
    return MakeError(ErrorCode::kInvalid, "mode " + Quote(mode) + " is not one of none, allowlist, open");
  }
  policy.mode = *parsed_mode;
  for (const auto& [list, texts] : {std::pair{"allow", &allow}, std::pair{"deny", &deny}}) {
    if (texts->size() > kMaxEntries) {
      return MakeError(ErrorCode::kInvalid, std::string(list) + " has " + std::to_string(texts->size()) +
                                                " entries; at most 1000 are allowed");
    }
    if (policy.mode == Mode::kNone && !texts->empty()) {
      return MakeError(ErrorCode::kInvalid,
                       std::string("mode none takes no ") + list + " entries (nothing leaves the sandbox)");
    }
  }
  for (size_t i = 0; i < allow.size(); ++i) {
    auto entry = ParseAllowEntry(allow[i]);
    std::string where = "allow[" + std::to_string(i) + "] ";
    if (!entry) return MakeError(ErrorCode::kInvalid, where + entry.error().message);
    if (policy.mode == Mode::kOpen && entry->kind != AllowEntry::Kind::kPrefix) {
      return MakeError(ErrorCode::kInvalid, where + Quote(allow[i]) +
                                                ": mode open takes only address entries (every public name is "
                                                "reachable already; an address entry re-opens an always-denied range)");
    }
    policy.allow.push_back(std::move(*entry));
  }
  for (size_t i = 0; i < deny.size(); ++i) {
    auto entry = ParseAllowEntry(deny[i]);
    if (!entry) return MakeError(ErrorCode::kInvalid, "deny[" + std::to_string(i) + "] " + entry.error().message);
    policy.deny.push_back(std::move(*entry));
  }
  return policy;
}

std::vector<IpPrefix> AlwaysDeniedPrefixes(bool v6) {
  std::vector<IpPrefix> out;
  for (const auto& range : v6 ? DeniedV6() : DeniedV4()) out.push_back(range.prefix);
  return out;
}

bool IsAlwaysDenied(const IpAddress& address, const std::vector<IpAddress>& host_addresses) {
  return !DeniedRangeOf(address, host_addresses).empty();
}

bool ReachesDaemonListener(const IpAddress& given, uint16_t port, const LocalHost& host) {
  const IpAddress address = Unmapped(given);
  return std::any_of(host.listeners.begin(), host.listeners.end(), [&](const DaemonListener& listener) {
    if (listener.port != port) return false;
    const IpAddress bound = Unmapped(listener.address);
    if (IsUnspecified(bound)) return IsLocal(address, host);
    return address == bound || IsUnspecified(address);
  });
}

bool NameAllowed(const Policy& policy, std::string_view name, uint16_t port) {
  return NameEntry(policy.allow, name, port, /*zero_is_any=*/true) != nullptr;
}

bool AddressExplicitlyAllowed(const Policy& policy, const IpAddress& address, uint16_t port) {
  return AddressEntry(policy.allow, address, port, /*zero_is_any=*/true) != nullptr;
}

std::optional<uint16_t> ParsePort(std::string_view text) {
  if (!IsDigits(text) || text.size() > 5 || text[0] == '0') return std::nullopt;
  uint32_t value = 0;
  for (char c : text) value = value * 10 + static_cast<uint32_t>(c - '0');
  if (value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

Verdict DecideName(const Policy& policy, std::string_view name, uint16_t port) {
  if (policy.mode == Mode::kNone) return {false, "network mode is none"};
  const std::optional<std::string> normalized = NormalizeName(name);
  if (!normalized) return {false, Quote(name) + " is not a valid host name"};
  const std::string named = *normalized + (port != 0 ? ":" + std::to_string(port) : "");
  // A lookup (port 0) is refused only by a deny entry for every port: other ports stay open.
  if (const AllowEntry* deny = NameEntry(policy.deny, *normalized, port, /*zero_is_any=*/false)) {
    return {false, DeniedBy(named, *deny)};
  }
  if (policy.mode == Mode::kOpen || NameAllowed(policy, *normalized, port)) return {true, {}};
  return {false, named + " is not in the allowlist"};
}

Verdict Decide(const Policy& policy, const std::optional<std::string>& name, const IpAddress& address, uint16_t port,
               const LocalHost& host) {
  if (policy.mode == Mode::kNone) return {false, "network mode is none"};
  if (ReachesDaemonListener(address, port, host)) return {false, HostPort(address, port) + " is the daemon's own listener"};
  // A real connection has a real port: here port 0 matches only entries without a port.
  if (const AllowEntry* deny = AddressEntry(policy.deny, address, port, /*zero_is_any=*/false)) {
    return {false, DeniedBy(HostPort(address, port), *deny)};
  }
  const std::optional<std::string> normalized = name ? NormalizeName(*name) : std::nullopt;
  if (normalized) {
    if (const AllowEntry* deny = NameEntry(policy.deny, *normalized, port, /*zero_is_any=*/false)) {
      return {false, DeniedBy(*normalized + ":" + std::to_string(port), *deny)};
    }
  }
  if (AddressEntry(policy.allow, address, port, /*zero_is_any=*/false)) return {true, {}};
  std::string range = DeniedRangeOf(address, host.addresses);
  if (!range.empty()) return {false, range + " is always denied"};
  if (policy.mode == Mode::kOpen) return {true, {}};
  if (normalized && NameEntry(policy.allow, *normalized, port, /*zero_is_any=*/false)) return {true, {}};
  if (normalized) return {false, *normalized + ":" + std::to_string(port) + " is not in the allowlist"};
  if (name && !name->empty() && !IpAddress::Parse(*name)) {  // an IP literal says nothing more than the address
    return {false, Quote(*name) + " is not a valid host name, and " + HostPort(address, port) +
                       " is not in the allowlist"};
  }
  return {false, HostPort(address, port) + " is not in the allowlist"};
}

std::optional<std::string> NormalizeName(std::string_view name) {
  std::string lower = Lower(name);
  if (lower.ends_with('.')) lower.pop_back();
  if (!NameProblem(lower).empty()) return std::nullopt;
  return lower;
}

}  // namespace bulkhead::net
