// The egress policy of a sandbox and the one function that decides whether a connection or a
// DNS name is allowed (API.md "Network"). Pure logic: the egress proxy and the DNS resolver
// ask it, PUT .../network re-asks it for every open connection, and the API validates
// `network.allow` and `network.deny` entries with ParseAllowEntry.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "net/ip_address.h"

namespace bulkhead::net {

enum class Mode { kNone, kAllowlist, kOpen };
std::optional<Mode> ParseMode(std::string_view text);  // "none" | "allowlist" | "open"
const char* ModeName(Mode mode);

// One `allow` or `deny` entry (both take the same syntax):
//   "example.com"        exactly that name (case-insensitive, a trailing dot ignored)
//   "*.example.com"      every name below example.com, not example.com itself
//   "1.2.3.4", "2001:db8::1", "10.0.0.0/8", "fd00::/8"
//   any of these with ":port" (IPv6 in brackets: "[2001:db8::1]:443", "[fd00::/8]:443");
//   without a port, every port.
// Names are at most 253 characters of [a-z0-9-_.] labels (1..63 each, no empty label, the last
// one not all digits); "*.com"-style single-label suffixes are allowed but "*" and "*." are not.
struct AllowEntry {
  enum class Kind { kName, kSuffix, kPrefix };
  Kind kind = Kind::kName;
  std::string name;   // kName: the name; kSuffix: the suffix without "*." ; lower case, no dot at end
  IpPrefix prefix;    // kPrefix
  std::optional<uint16_t> port;
  std::string text;   // as given
};

// 422 errors (ErrorCode::kInvalid) with a message naming the entry and what is wrong:
// "\"*.\": a wildcard needs a domain after ..." (the caller adds where the entry was).
Result<AllowEntry> ParseAllowEntry(std::string_view text);

struct Policy {
  Mode mode = Mode::kNone;
  std::vector<AllowEntry> allow;
  std::vector<AllowEntry> deny;  // checked before `allow`: a deny wins over any allow
};
// Validates a whole policy: a known mode, at most 1000 entries in each list, each one parsing.
// Mode none takes no entries; allowlist takes any; open takes only address entries in `allow`,
// which re-open an always-denied range (e.g. open + "10.1.2.3:5432" reaches a database on the
// LAN), and any entries in `deny`. Messages name the entry by list and index:
// "allow[3] \"*.\": ...", "deny[0] ...".
Result<Policy> ParsePolicy(std::string_view mode, const std::vector<std::string>& allow,
                           const std::vector<std::string>& deny = {});

// Addresses never reached unless an address entry (kPrefix) explicitly matches them, in every
// mode: 0.0.0.0/8, 127.0.0.0/8, 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT), 169.254/16
// (link-local, cloud metadata), 192.0.0.0/24, 224.0.0.0/4 and up (multicast, reserved,
// broadcast); ::/128, ::1, fe80::/10, fc00::/7 (includes fd00:ec2::254), fec0::/10 (site-local),
// ff00::/8 (multicast), 64:ff9b:1::/48 (local-use NAT64), 2001::/32 (Teredo), and 64:ff9b::/96
// and 2002::/16 when they embed one of the v4 ranges above.
// `host_addresses`: the daemon host's own addresses (always denied too).
bool IsAlwaysDenied(const IpAddress& address, const std::vector<IpAddress>& host_addresses);

// The fixed ranges above (not the host's addresses, nor the embedding forms), for nftables sets.
std::vector<IpPrefix> AlwaysDeniedPrefixes(bool v6);

// A TCP socket the daemon itself listens on (its API, its E2B front): from there a sandbox
// could drive every other one, so no entry reopens it. The unspecified address (0.0.0.0, ::)
// listens on every local address.
struct DaemonListener {
  IpAddress address;
  uint16_t port = 0;
};

// The daemon's host as the decisions see it.
struct LocalHost {
  std::vector<IpAddress> addresses;       // of its interfaces: always denied (above)
  std::vector<DaemonListener> listeners;  // denied whatever the entries say
  // Whether an address is the host's right now, for one `addresses` may not hold yet (read a
  // few seconds ago; an open-mode link's address is newer). Null: `addresses` is all there is.
  bool (*is_own)(const IpAddress& address) = nullptr;
};

// True if a connection to `address`:`port` would reach one of the host's listeners: the
// listener's own address, or for one on 0.0.0.0 or :: any local address (loopback, the
// unspecified address, the host's addresses). Connecting to 0.0.0.0 or :: reaches loopback.
bool ReachesDaemonListener(const IpAddress& address, uint16_t port, const LocalHost& host);

// True if `name` (already lower-cased, no trailing dot) is allowed by a kName/kSuffix entry
// that has no port or has `port`. port 0 = "any port is fine" (used by the DNS resolver:
// a name is resolvable if some entry names it, whatever the entry's port).
bool NameAllowed(const Policy& policy, std::string_view name, uint16_t port);
// True if a kPrefix entry with no port or with `port` contains `address` (port 0: any port).
bool AddressExplicitlyAllowed(const Policy& policy, const IpAddress& address, uint16_t port);

// The decision for one connection. `name` is what the destination was called (CONNECT host,
// Host header, TLS SNI, or the name our DNS resolver answered with this address), if known.
// Rules, in order:
//   mode none                                   -> denied "network mode is none"
//   a daemon listener (ReachesDaemonListener)   -> denied "<address>:<port> is the daemon's own listener"
//   a deny entry matches the address, or the    -> denied "<address or name>:<port> is denied by deny
//   name (same matching as allow entries)          entry \"<entry as given>\""
//   address explicitly allowed (kPrefix match)  -> allowed (even in always-denied ranges)
//   address always denied                       -> denied "<range> is always denied"
//   mode open                                   -> allowed
//   name given and NameAllowed                  -> allowed
//   otherwise                                   -> denied "<name or address>:<port> is not in the allowlist"
// `name` is normalized here (NormalizeName); port 0 matches only entries without a port.
struct Verdict {
  bool allowed = false;
  std::string reason;  // for the egress log and 403 bodies; empty when allowed
};
Verdict Decide(const Policy& policy, const std::optional<std::string>& name, const IpAddress& address, uint16_t port,
               const LocalHost& host);

// Whether `name` may be looked up, or connected to by name, before it is resolved (the DNS
// resolver; the proxy's CONNECT and absolute-form hosts): mode none never, an invalid host
// name never, a name a deny entry matches never (port 0, a lookup: only a deny entry without
// a port refuses it, since other ports stay open), mode open always, allowlist when
// NameAllowed (port 0: any port). What the name resolves to is judged afterwards by Decide.
Verdict DecideName(const Policy& policy, std::string_view name, uint16_t port);

// Decimal 1..65535 without sign or leading zeros, else nullopt.
std::optional<uint16_t> ParsePort(std::string_view text);

// A DNS name as the resolver and the proxy compare it: lower case, no trailing dot. nullopt if
// it is not a syntactically valid host name (then it is never allowed). An IP literal is not a
// host name ("1.2.3.4" -> nullopt: its last label is all digits).
std::optional<std::string> NormalizeName(std::string_view name);

}  // namespace bulkhead::net
