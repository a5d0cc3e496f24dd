// The egress allowlist (net/allow_rules.h) and the address parsing under it. The input is
// lines: a mode, a destination name, a destination address, a port, then allow entries and,
// after a "!", deny entries. Every line also goes through each parser on its own.
//
// Checked: parsed entries, addresses and prefixes print back to text that parses to the same
// value; an entry allows what it names, and denies it when it is a deny entry too; and the
// security rules of Decide: mode none allows nothing, the daemon's listeners are never
// reached, nothing a deny entry names is allowed, and an always-denied address (in any of its
// spellings: IPv4, mapped, NAT64, 6to4) is reached only through an address entry that
// contains it.
#include <sys/socket.h>

#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "net/allow_rules.h"
#include "net/ip_address.h"

namespace {

using namespace bulkhead;
using namespace bulkhead::net;

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    lines.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string WithPort(const std::string& host, const std::optional<uint16_t>& port) {
  return port ? host + ":" + std::to_string(*port) : host;
}

void CheckAddress(const IpAddress& address) {
  const std::string text = address.ToString();
  auto again = IpAddress::Parse(text);
  FUZZ_CHECK(again && *again == address, text);
  sockaddr_storage storage{};
  address.ToSockaddr(443, &storage);
  FUZZ_CHECK(IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&storage)) == address, text);
}

IpAddress V6(std::initializer_list<uint8_t> head, const uint8_t* v4, size_t at) {
  IpAddress out;
  out.v6 = true;
  size_t i = 0;
  for (uint8_t b : head) out.bytes[i++] = b;
  for (size_t k = 0; k < 4; ++k) out.bytes[at + k] = v4[k];
  return out;
}

// An always-denied IPv4 address stays denied however IPv6 spells it.
void CheckDeniedSpellings(const IpAddress& v4) {
  if (v4.v6 || !IsAlwaysDenied(v4, {})) return;
  const uint8_t* b = v4.bytes.data();
  const IpAddress mapped = V6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, b, 12);
  const IpAddress nat64 = V6({0, 0x64, 0xff, 0x9b}, b, 12);
  const IpAddress six_to_four = V6({0x20, 0x02}, b, 2);
  FUZZ_CHECK(IsAlwaysDenied(mapped, {}), mapped.ToString());
  FUZZ_CHECK(IsAlwaysDenied(nat64, {}), nat64.ToString());
  FUZZ_CHECK(IsAlwaysDenied(six_to_four, {}), six_to_four.ToString());
}

void CheckEntry(const AllowEntry& entry) {
  Policy policy{Mode::kAllowlist, {entry}};
  const uint16_t port = entry.port.value_or(8443);
  // The same entry in both lists: deny wins.
  const Policy both{Mode::kAllowlist, {entry}, {entry}};
  if (entry.kind == AllowEntry::Kind::kPrefix) {
    FUZZ_CHECK(!Decide(both, std::nullopt, entry.prefix.address, port, {}).allowed, entry.text);
  } else if (entry.kind == AllowEntry::Kind::kName) {
    FUZZ_CHECK(!DecideName(both, entry.name, port).allowed, entry.text);
  }
  switch (entry.kind) {
    case AllowEntry::Kind::kName: {
      auto again = ParseAllowEntry(WithPort(entry.name, entry.port));
      FUZZ_CHECK(again.ok() && again->kind == entry.kind && again->name == entry.name && again->port == entry.port,
                 entry.text);
      FUZZ_CHECK(NormalizeName(entry.name) == entry.name, entry.name);
      FUZZ_CHECK(NameAllowed(policy, entry.name, port), entry.text);
      FUZZ_CHECK(DecideName(policy, entry.name, port).allowed, entry.text);
      break;
    }
    case AllowEntry::Kind::kSuffix: {
      auto again = ParseAllowEntry(WithPort("*." + entry.name, entry.port));
      FUZZ_CHECK(again.ok() && again->kind == entry.kind && again->name == entry.name && again->port == entry.port,
                 entry.text);
      FUZZ_CHECK(!NameAllowed(policy, entry.name, port), entry.text);
      const std::string below = "a." + entry.name;
      if (below.size() <= 253) FUZZ_CHECK(NameAllowed(policy, below, port), entry.text);
      break;
    }
    case AllowEntry::Kind::kPrefix: {
      const std::string prefix = entry.prefix.ToString();
      auto again = ParseAllowEntry(entry.prefix.address.v6 && entry.port ? "[" + prefix + "]:" + std::to_string(*entry.port)
                                                                         : WithPort(prefix, entry.port));
      FUZZ_CHECK(again.ok() && again->kind == entry.kind && again->prefix.address == entry.prefix.address &&
                     again->prefix.length == entry.prefix.length && again->port == entry.port,
                 entry.text);
      FUZZ_CHECK(entry.prefix.Contains(entry.prefix.address), entry.text);
      FUZZ_CHECK(AddressExplicitlyAllowed(policy, entry.prefix.address, port), entry.text);
      FUZZ_CHECK(Decide(policy, std::nullopt, entry.prefix.address, port, {}).allowed, entry.text);
      break;
    }
  }
}

void CheckLine(const std::string& line) {
  if (auto entry = ParseAllowEntry(line); entry.ok()) CheckEntry(*entry);
  if (auto name = NormalizeName(line)) {
    FUZZ_CHECK(NormalizeName(*name) == *name, *name);
    FUZZ_CHECK(name->size() <= 253 && !name->ends_with('.'), *name);
    FUZZ_CHECK(!IpAddress::Parse(*name), *name + " is an address and a name");
  }
  if (auto port = ParsePort(line)) FUZZ_CHECK(std::to_string(*port) == line && *port != 0, line);
  if (auto address = IpAddress::Parse(line)) {
    CheckAddress(*address);
    CheckDeniedSpellings(*address);
  }
  if (auto prefix = IpPrefix::Parse(line)) {
    auto again = IpPrefix::Parse(prefix->ToString());
    FUZZ_CHECK(again && again->address == prefix->address && again->length == prefix->length, line);
    FUZZ_CHECK(prefix->Contains(prefix->address), line);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> lines = Lines(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const std::string& line : lines) CheckLine(line);
  if (lines.size() < 4) return 0;

  std::vector<std::string> allow, deny;
  for (auto line = lines.begin() + 4; line != lines.end(); ++line) {
    if (line->starts_with('!')) {
      deny.push_back(line->substr(1));
    } else {
      allow.push_back(*line);
    }
  }
  Result<Policy> policy = ParsePolicy(lines[0], allow, deny);
  if (!policy.ok()) return 0;
  const std::string& name = lines[1];
  const std::optional<IpAddress> address = IpAddress::Parse(lines[2]);
  const uint16_t port = ParsePort(lines[3]).value_or(0);
  const Policy denied{Mode::kAllowlist, policy->deny};
  if (!address) {
    const Verdict verdict = DecideName(*policy, name, port);
    if (verdict.allowed && port != 0) FUZZ_CHECK(!NameAllowed(denied, *NormalizeName(name), port), name);
    return 0;
  }
  // The daemon's own listeners: one on loopback, one on every address (as --e2b-listen 0.0.0.0:P).
  const LocalHost host{.addresses = {*IpAddress::Parse("198.51.100.7")},
                       .listeners = {{*IpAddress::Parse("127.0.0.1"), 7420}, {*IpAddress::Parse("0.0.0.0"), 7421}}};
  const Verdict verdict = Decide(*policy, name.empty() ? std::nullopt : std::optional(name), *address, port, host);
  if (policy->mode == Mode::kNone) FUZZ_CHECK(!verdict.allowed, "mode none allowed a connection");
  const std::string destination = address->ToString() + ":" + std::to_string(port);
  if (verdict.allowed) FUZZ_CHECK(!ReachesDaemonListener(*address, port, host), destination + " is a daemon listener");
  if (verdict.allowed && IsAlwaysDenied(*address, host.addresses)) {
    FUZZ_CHECK(AddressExplicitlyAllowed(*policy, *address, port), address->ToString() + " is always denied");
  }
  // Nothing a deny entry names is allowed (port 0 matches only entries without a port, which
  // NameAllowed's "any port" cannot tell apart: checked on real ports).
  if (verdict.allowed && port != 0) {
    FUZZ_CHECK(!AddressExplicitlyAllowed(denied, *address, port), destination + " is denied");
    if (auto normalized = NormalizeName(name)) FUZZ_CHECK(!NameAllowed(denied, *normalized, port), *normalized);
  }
  if (!verdict.allowed) FUZZ_CHECK(!verdict.reason.empty(), "a denial without a reason");
  for (bool v6 : {false, true}) {
    for (const IpPrefix& prefix : AlwaysDeniedPrefixes(v6)) {
      if (prefix.Contains(*address)) FUZZ_CHECK(IsAlwaysDenied(*address, {}), address->ToString());
    }
  }
  return 0;
}
