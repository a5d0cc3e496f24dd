#include "net/allow_rules.h"
#include "net/host_addresses.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bulkhead::net {
namespace {

IpAddress Addr(const char* text) {
  auto a = IpAddress::Parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress{});
}

Policy MakePolicy(const char* mode, const std::vector<std::string>& allow, const std::vector<std::string>& deny = {}) {
  auto policy = ParsePolicy(mode, allow, deny);
  EXPECT_TRUE(policy.ok()) << policy.error().message;
  return policy.ok() ? *policy : Policy{};
}

// The message of a rejected entry; fails the test if the entry was accepted.
std::string EntryError(const std::string& text) {
  auto entry = ParseAllowEntry(text);
  EXPECT_FALSE(entry.ok()) << "accepted: " << text;
  if (entry.ok()) return {};
  EXPECT_EQ(entry.error().code, ErrorCode::kInvalid);
  return entry.error().message;
}

TEST(NetModeTest, ParsesTheThreeModesExactly) {
  for (Mode mode : {Mode::kNone, Mode::kAllowlist, Mode::kOpen}) {
    EXPECT_EQ(ParseMode(ModeName(mode)), mode);
  }
  EXPECT_STREQ(ModeName(Mode::kAllowlist), "allowlist");
  for (const char* text : {"", "None", "OPEN", "allow", "allowlist ", "deny"}) {
    EXPECT_FALSE(ParseMode(text).has_value()) << text;
  }
}

TEST(AllowEntryTest, NamesAreLowerCasedWithoutTrailingDot) {
  auto entry = ParseAllowEntry("Example.COM.");
  ASSERT_TRUE(entry.ok()) << entry.error().message;
  EXPECT_EQ(entry->kind, AllowEntry::Kind::kName);
  EXPECT_EQ(entry->name, "example.com");
  EXPECT_FALSE(entry->port.has_value());
  EXPECT_EQ(entry->text, "Example.COM.");

  auto underscore = ParseAllowEntry("_acme-challenge.x-1.example.com");
  ASSERT_TRUE(underscore.ok()) << underscore.error().message;
  EXPECT_EQ(underscore->name, "_acme-challenge.x-1.example.com");
  EXPECT_TRUE(ParseAllowEntry("localhost").ok());
  EXPECT_TRUE(ParseAllowEntry("xn--bcher-kva.example").ok());
}

TEST(AllowEntryTest, WildcardIsASuffix) {
  auto entry = ParseAllowEntry("*.Example.com");
  ASSERT_TRUE(entry.ok()) << entry.error().message;
  EXPECT_EQ(entry->kind, AllowEntry::Kind::kSuffix);
  EXPECT_EQ(entry->name, "example.com");
  auto tld = ParseAllowEntry("*.com");
  ASSERT_TRUE(tld.ok());
  EXPECT_EQ(tld->name, "com");
  auto with_port = ParseAllowEntry("*.example.com.:8443");
  ASSERT_TRUE(with_port.ok()) << with_port.error().message;
  EXPECT_EQ(with_port->name, "example.com");
  EXPECT_EQ(with_port->port, 8443);
}

TEST(AllowEntryTest, AddressesAndPrefixesWithAndWithoutPorts) {
  struct Case {
    const char* text;
    const char* prefix;
    std::optional<uint16_t> port;
  };
  for (const Case& c : std::vector<Case>{
           {"1.2.3.4", "1.2.3.4/32", std::nullopt},
           {"1.2.3.4:443", "1.2.3.4/32", 443},
           {"10.0.0.0/8", "10.0.0.0/8", std::nullopt},
           {"10.0.0.0/8:5432", "10.0.0.0/8", 5432},
           {"2001:db8::1", "2001:db8::1/128", std::nullopt},
           {"[2001:DB8::1]:443", "2001:db8::1/128", 443},
           {"[2001:db8::1]", "2001:db8::1/128", std::nullopt},
           {"fd00::/8", "fd00::/8", std::nullopt},
           {"[fd00::/8]:443", "fd00::/8", 443},
           {"::ffff:10.1.2.3", "10.1.2.3/32", std::nullopt},
           {"0.0.0.0/0:1", "0.0.0.0/0", 1},
           {"1.2.3.4:65535", "1.2.3.4/32", 65535},
           // Without brackets the last group is part of the address, never a port.
           {"2001:db8::1:443", "2001:db8::1:443/128", std::nullopt},
       }) {
    auto entry = ParseAllowEntry(c.text);
    ASSERT_TRUE(entry.ok()) << c.text << ": " << entry.error().message;
    EXPECT_EQ(entry->kind, AllowEntry::Kind::kPrefix) << c.text;
    EXPECT_EQ(entry->prefix.ToString(), c.prefix) << c.text;
    EXPECT_EQ(entry->port, c.port) << c.text;
    EXPECT_EQ(entry->text, c.text);
  }
}

TEST(AllowEntryTest, MessagesQuoteTheEntryAndSayWhatIsWrong) {
  EXPECT_EQ(EntryError("*.").rfind("\"*.\": ", 0), 0u) << EntryError("*.");
  EXPECT_NE(EntryError("*.").find("wildcard"), std::string::npos);
  EXPECT_NE(EntryError("*").find("wildcard"), std::string::npos);
  EXPECT_NE(EntryError("").find("empty"), std::string::npos);
  EXPECT_NE(EntryError("10.0.0.1/8").find("10.0.0.0/8"), std::string::npos);
  EXPECT_NE(EntryError("example.com:0").find("1 to 65535"), std::string::npos);
  EXPECT_NE(EntryError("[1.2.3.4]:80").find("brackets"), std::string::npos);
  EXPECT_NE(EntryError("a.*.example.com").find("first label"), std::string::npos);
  EXPECT_NE(EntryError(std::string(64, 'a') + ".com").find("63"), std::string::npos);
  // Control characters and non-ASCII never reach the message raw; long entries are cut.
  std::string control = EntryError("ex\x01\xff\"ample.com");
  EXPECT_EQ(control.rfind("\"ex\\x01\\xff\\\"ample.com\": ", 0), 0u) << control;
  std::string long_message = EntryError(std::string(300, 'a'));
  EXPECT_LT(long_message.size(), 200u);
  EXPECT_NE(long_message.find("...\""), std::string::npos);
}

TEST(AllowEntryTest, RejectsMalformedEntries) {
  std::vector<std::string> bad = {
      "*", "*.", "*..", "**.example.com", "*example.com", "a.*.example.com", "example.*", "*.*.example.com",
      "", ".", "..", ".example.com", "example..com", "example.com..", "exa mple.com", "exa/mple.com",
      "ex@mple.com", "example.com/", "http://example.com", "example.com:", ":443", "example.com:0",
      "example.com:65536", "example.com:99999999", "example.com:-1", "example.com:+1", "example.com:0443",
      "example.com:https", "example.com: 443", "example.com:443:1", "1.2.3", "01.2.3.4", "1.2.3.4.5",
      "256.0.0.0", "1.2.3.4:0", "1.2.3.4:65536", "10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/", "fd00::1/8",
      "[1.2.3.4]:80", "[2001:db8::1", "[2001:db8::1]x", "[2001:db8::1]:", "[2001:db8::1]:0", "[]:443",
      "[example.com]:443", "fe80::1%eth0", "2001:db8:::1", "123", "example.123", "1.2.3.4.example.4",
      std::string(64, 'a') + ".com", std::string(250, 'a') + ".com", std::string("exa\0mple.com", 12),
      "ex\xc3\xa4mple.com", "example.com\n"};
  for (const auto& text : bad) EntryError(text);
}

TEST(AllowEntryTest, NameLengthLimitsAreExact) {
  std::string label63(63, 'a');
  EXPECT_TRUE(ParseAllowEntry(label63 + ".com").ok());
  // 253 characters: 3 labels of 63, one of 61, and 3 dots.
  std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  ASSERT_EQ(name253.size(), 253u);
  EXPECT_TRUE(ParseAllowEntry(name253).ok());
  EXPECT_TRUE(ParseAllowEntry(name253 + ".").ok());
  EXPECT_TRUE(ParseAllowEntry(name253 + ":443").ok());
  EntryError(name253 + "b");
}

TEST(PolicyTest, ValidatesModeAndEntries) {
  auto unknown = ParsePolicy("wide-open", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalid);
  EXPECT_NE(unknown.error().message.find("\"wide-open\""), std::string::npos);

  EXPECT_TRUE(ParsePolicy("none", {}).ok());
  auto none_with_entries = ParsePolicy("none", {"a.test"});
  ASSERT_FALSE(none_with_entries.ok());
  EXPECT_NE(none_with_entries.error().message.find("none"), std::string::npos);

  auto allowlist = ParsePolicy("allowlist", {"a.test", "*.b.test:443", "10.0.0.5", "[fd00::/8]:80"});
  ASSERT_TRUE(allowlist.ok()) << allowlist.error().message;
  EXPECT_EQ(allowlist->mode, Mode::kAllowlist);
  ASSERT_EQ(allowlist->allow.size(), 4u);
  EXPECT_EQ(allowlist->allow[1].kind, AllowEntry::Kind::kSuffix);
  EXPECT_TRUE(ParsePolicy("allowlist", {}).ok());

  auto bad = ParsePolicy("allowlist", {"a.test", "b.test", "*."});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalid);
  EXPECT_EQ(bad.error().message.rfind("allow[2] \"*.\": ", 0), 0u) << bad.error().message;
}

TEST(PolicyTest, OpenModeTakesOnlyAddressEntries) {
  auto ok = ParsePolicy("open", {"10.1.2.3:5432", "169.254.169.254"});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->mode, Mode::kOpen);
  auto names = ParsePolicy("open", {"10.1.2.3", "a.test"});
  ASSERT_FALSE(names.ok());
  EXPECT_EQ(names.error().message.rfind("allow[1] \"a.test\": ", 0), 0u) << names.error().message;
  EXPECT_FALSE(ParsePolicy("open", {"*.a.test"}).ok());
}

TEST(PolicyTest, DenyEntriesTakeTheAllowSyntaxInEveryModeButNone) {
  for (const char* mode : {"allowlist", "open"}) {
    auto policy = ParsePolicy(mode, {}, {"a.test", "*.b.test:443", "198.18.0.12", "198.18.0.0/24:80", "[2001:db8::/32]:53"});
    ASSERT_TRUE(policy.ok()) << mode << ": " << policy.error().message;
    ASSERT_EQ(policy->deny.size(), 5u);
    EXPECT_EQ(policy->deny[1].kind, AllowEntry::Kind::kSuffix);
    EXPECT_EQ(policy->deny[3].kind, AllowEntry::Kind::kPrefix);
    EXPECT_EQ(policy->deny[3].port, 80);
    EXPECT_TRUE(policy->allow.empty());
  }
  auto none = ParsePolicy("none", {}, {"198.18.0.12"});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "mode none takes no deny entries (nothing leaves the sandbox)");
  auto bad = ParsePolicy("open", {}, {"a.test", "*."});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalid);
  EXPECT_EQ(bad.error().message.rfind("deny[1] \"*.\": ", 0), 0u) << bad.error().message;
  EXPECT_FALSE(ParsePolicy("open", {}, {"*"}).ok());
  std::vector<std::string> deny(1001, "a.test");
  auto too_many = ParsePolicy("open", {}, deny);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().message, "deny has 1001 entries; at most 1000 are allowed");
}

TEST(PolicyTest, AtMostAThousandEntries) {
  std::vector<std::string> allow;
  for (int i = 0; i < 1000; ++i) allow.push_back("h" + std::to_string(i) + ".test");
  EXPECT_TRUE(ParsePolicy("allowlist", allow).ok());
  allow.push_back("one-more.test");
  auto too_many = ParsePolicy("allowlist", allow);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("1000"), std::string::npos);
}

TEST(AlwaysDeniedTest, EveryRangeAndItsEdges) {
  const std::vector<const char*> denied = {
      "0.0.0.0", "0.255.255.255", "127.0.0.1", "127.255.255.255", "10.0.0.0", "10.0.0.5", "10.255.255.255",
      "172.16.0.0", "172.31.255.255", "192.168.0.0", "192.168.255.255", "100.64.0.0", "100.100.100.200",
      "100.127.255.255", "169.254.0.0", "169.254.169.254", "169.254.255.255", "192.0.0.0", "192.0.0.255",
      "224.0.0.0", "224.0.0.251", "239.255.255.250", "240.0.0.1", "255.255.255.255",
      "::", "::1", "fe80::", "fe80::1", "febf:ffff::1", "fc00::", "fd00:ec2::254", "fdff:ffff::1", "ff02::1",
      "ff00::", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
      "64:ff9b::a00:5", "64:ff9b::10.0.0.5", "64:ff9b::169.254.169.254", "64:ff9b::127.0.0.1", "64:ff9b::100.64.0.1",
      "2002:a00:5::", "2002:a9fe:a9fe::1", "2002:7f00:1::", "2002:c0a8:101:1::1", "fec0::1", "feff::1",
      "64:ff9b:1::a00:5", "64:ff9b:1:ffff::8", "2001::1", "2001:0:ffff::1"};
  for (const char* text : denied) EXPECT_TRUE(IsAlwaysDenied(Addr(text), {})) << text;

  const std::vector<const char*> reachable = {
      "1.0.0.0", "9.255.255.255", "11.0.0.0", "8.8.8.8", "126.255.255.255", "128.0.0.0", "172.15.255.255",
      "172.32.0.0", "192.167.255.255", "192.169.0.0", "100.63.255.255", "100.128.0.0", "169.253.255.255",
      "169.255.0.0", "192.0.1.0", "191.255.255.255", "223.255.255.255", "198.18.0.10", "198.18.0.12",
      "2001:db8:1::10", "2606:4700::1", "::2", "fe7f:ffff::1", "fe00::1", "fbff:ffff::1",
      "64:ff9b::808:808", "64:ff9b::198.18.0.10", "64:ff9b:2::1", "2002:808:808::", "2002:c612:a::1",
      "2001:1::1"};
  for (const char* text : reachable) EXPECT_FALSE(IsAlwaysDenied(Addr(text), {})) << text;
}

TEST(AlwaysDeniedTest, HandMadeMappedAddressIsJudgedAsIpv4) {
  IpAddress mapped;
  mapped.v6 = true;
  mapped.bytes = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 5};
  EXPECT_TRUE(IsAlwaysDenied(mapped, {}));
  mapped.bytes[12] = 8;
  EXPECT_FALSE(IsAlwaysDenied(mapped, {}));
}

TEST(AlwaysDeniedTest, TheHostsOwnAddressesAreDenied) {
  std::vector<IpAddress> host = {Addr("198.18.0.1"), Addr("2001:db8:1::1")};
  EXPECT_TRUE(IsAlwaysDenied(Addr("198.18.0.1"), host));
  EXPECT_TRUE(IsAlwaysDenied(Addr("::ffff:198.18.0.1"), host));
  EXPECT_TRUE(IsAlwaysDenied(Addr("2001:db8:1::1"), host));
  EXPECT_FALSE(IsAlwaysDenied(Addr("198.18.0.10"), host));
  EXPECT_FALSE(IsAlwaysDenied(Addr("198.18.0.1"), {}));
  // Through NAT64 or 6to4 the host is still the host.
  EXPECT_TRUE(IsAlwaysDenied(Addr("64:ff9b::198.18.0.1"), host));
  EXPECT_TRUE(IsAlwaysDenied(Addr("2002:c612:1::"), host));
  EXPECT_FALSE(IsAlwaysDenied(Addr("64:ff9b::198.18.0.1"), {}));
}

TEST(NameAllowedTest, ExactNamesAndSuffixes) {
  Policy p = MakePolicy("allowlist", {"a.test", "*.example.com"});
  EXPECT_TRUE(NameAllowed(p, "a.test", 443));
  EXPECT_FALSE(NameAllowed(p, "b.a.test", 443));
  EXPECT_FALSE(NameAllowed(p, "aa.test", 443));
  EXPECT_TRUE(NameAllowed(p, "a.example.com", 443));
  EXPECT_TRUE(NameAllowed(p, "x.y.example.com", 80));
  EXPECT_FALSE(NameAllowed(p, "example.com", 443));
  EXPECT_FALSE(NameAllowed(p, "badexample.com", 443));
  EXPECT_FALSE(NameAllowed(p, ".example.com", 443));
  EXPECT_FALSE(NameAllowed(p, "example.com.evil.test", 443));
  EXPECT_FALSE(NameAllowed(p, "", 443));
}

TEST(NameAllowedTest, PortQualifiedEntriesMatchOnlyTheirPortAndZeroMeansAny) {
  Policy p = MakePolicy("allowlist", {"a.test:443", "*.b.test:8443"});
  EXPECT_TRUE(NameAllowed(p, "a.test", 443));
  EXPECT_FALSE(NameAllowed(p, "a.test", 80));
  EXPECT_TRUE(NameAllowed(p, "a.test", 0));
  EXPECT_TRUE(NameAllowed(p, "x.b.test", 8443));
  EXPECT_FALSE(NameAllowed(p, "x.b.test", 443));
  EXPECT_TRUE(NameAllowed(p, "x.b.test", 0));
  EXPECT_FALSE(NameAllowed(p, "c.test", 0));
}

TEST(AddressExplicitlyAllowedTest, PrefixAndPort) {
  Policy p = MakePolicy("allowlist", {"10.0.0.0/24:5432", "169.254.169.254", "a.test", "[fd00::/8]:80"});
  EXPECT_TRUE(AddressExplicitlyAllowed(p, Addr("10.0.0.5"), 5432));
  EXPECT_FALSE(AddressExplicitlyAllowed(p, Addr("10.0.0.5"), 5433));
  EXPECT_TRUE(AddressExplicitlyAllowed(p, Addr("10.0.0.5"), 0));
  EXPECT_FALSE(AddressExplicitlyAllowed(p, Addr("10.0.1.5"), 5432));
  EXPECT_TRUE(AddressExplicitlyAllowed(p, Addr("169.254.169.254"), 80));
  EXPECT_TRUE(AddressExplicitlyAllowed(p, Addr("::ffff:169.254.169.254"), 1));
  EXPECT_TRUE(AddressExplicitlyAllowed(p, Addr("fd00:ec2::254"), 80));
  EXPECT_FALSE(AddressExplicitlyAllowed(p, Addr("fd00:ec2::254"), 443));
  EXPECT_FALSE(AddressExplicitlyAllowed(p, Addr("198.18.0.10"), 80));
}

TEST(DecideTest, ModeNoneDeniesEverything) {
  Policy none;
  Verdict v = Decide(none, std::string("a.test"), Addr("198.18.0.10"), 443, {});
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "network mode is none");
}

TEST(DecideTest, AllowlistAllowsListedNamesOnTheirPorts) {
  Policy p = MakePolicy("allowlist", {"a.test", "*.b.test:443"});
  Verdict ok = Decide(p, std::string("a.test"), Addr("198.18.0.10"), 80, {});
  EXPECT_TRUE(ok.allowed);
  EXPECT_TRUE(ok.reason.empty());
  EXPECT_TRUE(Decide(p, std::string("A.Test."), Addr("198.18.0.10"), 443, {}).allowed);
  EXPECT_TRUE(Decide(p, std::string("www.b.test"), Addr("198.18.0.11"), 443, {}).allowed);

  Verdict wrong_port = Decide(p, std::string("www.b.test"), Addr("198.18.0.11"), 80, {});
  EXPECT_FALSE(wrong_port.allowed);
  EXPECT_EQ(wrong_port.reason, "www.b.test:80 is not in the allowlist");
  Verdict apex = Decide(p, std::string("b.test"), Addr("198.18.0.11"), 443, {});
  EXPECT_FALSE(apex.allowed);
  Verdict other = Decide(p, std::string("Other.Test"), Addr("198.18.0.12"), 443, {});
  EXPECT_FALSE(other.allowed);
  EXPECT_EQ(other.reason, "other.test:443 is not in the allowlist");
}

TEST(DecideTest, WithoutANameTheAddressIsJudged) {
  Policy p = MakePolicy("allowlist", {"a.test", "198.18.0.11:443"});
  Verdict literal = Decide(p, std::nullopt, Addr("198.18.0.10"), 443, {});
  EXPECT_FALSE(literal.allowed);
  EXPECT_EQ(literal.reason, "198.18.0.10:443 is not in the allowlist");
  Verdict v6 = Decide(p, std::nullopt, Addr("2001:db8:1::10"), 443, {});
  EXPECT_EQ(v6.reason, "[2001:db8:1::10]:443 is not in the allowlist");
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.11"), 443, {}).allowed);
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("198.18.0.11"), 80, {}).allowed);
  // An IP literal given as the name is not a host name: it cannot match a name entry.
  Verdict named_literal = Decide(p, std::string("198.18.0.10"), Addr("198.18.0.10"), 443, {});
  EXPECT_FALSE(named_literal.allowed);
  EXPECT_EQ(named_literal.reason, "198.18.0.10:443 is not in the allowlist");
}

TEST(DecideTest, AnAllowedNameResolvingToAnAlwaysDeniedAddressIsDenied) {
  Policy p = MakePolicy("allowlist", {"rebind.test", "*.test"});
  Verdict v = Decide(p, std::string("rebind.test"), Addr("10.0.0.5"), 80, {});
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "10.0.0.0/8 (private network) is always denied");
  Verdict metadata = Decide(p, std::string("rebind.test"), Addr("169.254.169.254"), 80, {});
  EXPECT_FALSE(metadata.allowed);
  EXPECT_NE(metadata.reason.find("169.254.0.0/16"), std::string::npos);
  Verdict nat64 = Decide(p, std::string("rebind.test"), Addr("64:ff9b::a00:5"), 80, {});
  EXPECT_FALSE(nat64.allowed);
  EXPECT_EQ(nat64.reason, "64:ff9b::/96 embedding 10.0.0.0/8 (private network) is always denied");
  Verdict host = Decide(p, std::string("rebind.test"), Addr("198.18.0.1"), 7420, {{Addr("198.18.0.1")}, {}});
  EXPECT_FALSE(host.allowed);
  EXPECT_EQ(host.reason, "the host's own address 198.18.0.1 is always denied");
}

TEST(DecideTest, NoEntryReopensTheDaemonsOwnListeners) {
  // The API on every address (0.0.0.0:7420), the E2B front on loopback only (127.0.0.1:7421).
  const LocalHost host{{Addr("198.18.0.1"), Addr("2001:db8:1::1")},
                       {{Addr("0.0.0.0"), 7420}, {Addr("127.0.0.1"), 7421}}};
  for (const char* mode : {"allowlist", "open"}) {
    Policy p = MakePolicy(mode, {"127.0.0.0/8", "::1", "0.0.0.0/8", "198.18.0.0/16", "2001:db8::/32", "::/128",
                                 "198.18.0.1:7420", "127.0.0.1:7421"});
    for (const char* address : {"127.0.0.1", "127.1.2.3", "0.0.0.0", "198.18.0.1", "::1", "::", "2001:db8:1::1",
                                "::ffff:127.0.0.1", "::ffff:198.18.0.1"}) {
      Verdict v = Decide(p, std::nullopt, Addr(address), 7420, host);
      EXPECT_FALSE(v.allowed) << mode << " " << address;
      EXPECT_NE(v.reason.find("is the daemon's own listener"), std::string::npos) << v.reason;
      // A name resolving there is judged by that address too.
      EXPECT_FALSE(Decide(p, std::string("home.test"), Addr(address), 7420, host).allowed) << address;
    }
    EXPECT_FALSE(Decide(p, std::nullopt, Addr("127.0.0.1"), 7421, host).allowed);
    EXPECT_FALSE(Decide(p, std::nullopt, Addr("0.0.0.0"), 7421, host).allowed);  // connects to loopback
    // Another port of the same addresses, and a listener's port on an address it does not
    // listen on (or that is not the host's), stay the entries' to decide.
    EXPECT_TRUE(Decide(p, std::nullopt, Addr("127.0.0.1"), 8080, host).allowed);
    EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.1"), 7421, host).allowed);
    EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.10"), 7420, host).allowed);
  }
  EXPECT_EQ(Decide(MakePolicy("allowlist", {"127.0.0.1"}), std::nullopt, Addr("127.0.0.1"), 7420, host).reason,
            "127.0.0.1:7420 is the daemon's own listener");
  // An address newer than the list (an open-mode link's host side): the kernel is asked.
  LocalHost newer = host;
  newer.is_own = [](const IpAddress& a) { return a == IpAddress::Parse("10.213.0.1"); };
  Policy open = MakePolicy("open", {"10.0.0.0/8"});
  EXPECT_TRUE(Decide(open, std::nullopt, Addr("10.213.0.1"), 7420, host).allowed);
  EXPECT_FALSE(Decide(open, std::nullopt, Addr("10.213.0.1"), 7420, newer).allowed);
  EXPECT_TRUE(Decide(open, std::nullopt, Addr("10.213.0.5"), 7420, newer).allowed);
}

TEST(IsOwnAddressTest, AnswersWhatThisNamespaceHas) {
  EXPECT_TRUE(IsOwnAddress(Addr("127.0.0.1")));
  EXPECT_TRUE(IsOwnAddress(Addr("127.9.9.9")));  // all of 127/8 is local
  EXPECT_TRUE(IsOwnAddress(Addr("0.0.0.0")));
  for (const IpAddress& address : ReadHostAddresses()) {
    if (!(address.v6 && address.bytes[0] == 0xfe && (address.bytes[1] & 0xc0) == 0x80)) {  // link-local needs a scope
      EXPECT_TRUE(IsOwnAddress(address)) << address.ToString();
    }
  }
  EXPECT_FALSE(IsOwnAddress(Addr("192.0.2.1")));  // TEST-NET-1: on no interface here
}

TEST(DecideTest, AnAddressEntryReopensAnAlwaysDeniedAddressOnItsPort) {
  Policy p = MakePolicy("allowlist", {"rebind.test", "10.0.0.5:5432"});
  EXPECT_TRUE(Decide(p, std::string("rebind.test"), Addr("10.0.0.5"), 5432, {}).allowed);
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("10.0.0.5"), 5432, {}).allowed);
  EXPECT_FALSE(Decide(p, std::string("rebind.test"), Addr("10.0.0.5"), 80, {}).allowed);
  // Port 0 is no real destination: a port-qualified entry does not cover it.
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("10.0.0.5"), 0, {}).allowed);
  Policy host_entry = MakePolicy("allowlist", {"198.18.0.1:8080"});
  EXPECT_TRUE(Decide(host_entry, std::nullopt, Addr("198.18.0.1"), 8080, {{Addr("198.18.0.1")}, {}}).allowed);
}

TEST(DecideTest, OpenAllowsPublicAddressesButNotAlwaysDeniedOnes) {
  Policy p = MakePolicy("open", {"169.254.169.254:80"});
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.12"), 443, {}).allowed);
  EXPECT_TRUE(Decide(p, std::string("anything.test"), Addr("2001:db8:1::10"), 443, {}).allowed);
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("169.254.169.254"), 80, {}).allowed);
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("169.254.169.254"), 81, {}).allowed);
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("127.0.0.1"), 7420, {}).allowed);
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("fd00:ec2::254"), 80, {}).allowed);
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("100.100.100.200"), 80, {}).allowed);
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("198.18.0.1"), 7420, {{Addr("198.18.0.1")}, {}}).allowed);
}

TEST(DecideTest, ADenyEntryWinsOverABroaderAllowAndNamesItself) {
  Policy p = MakePolicy("allowlist", {"*.a.test", "198.18.0.0/24"}, {"secret.a.test", "198.18.0.12", "198.18.0.13:443"});
  EXPECT_TRUE(Decide(p, std::string("www.a.test"), Addr("198.18.0.10"), 443, {}).allowed);
  Verdict by_name = Decide(p, std::string("Secret.A.Test."), Addr("198.18.0.10"), 443, {});
  EXPECT_FALSE(by_name.allowed);
  EXPECT_EQ(by_name.reason, "secret.a.test:443 is denied by deny entry \"secret.a.test\"");
  Verdict by_address = Decide(p, std::nullopt, Addr("198.18.0.12"), 80, {});
  EXPECT_FALSE(by_address.allowed);
  EXPECT_EQ(by_address.reason, "198.18.0.12:80 is denied by deny entry \"198.18.0.12\"");
  // An allowed name resolving to a denied address is denied.
  EXPECT_FALSE(Decide(p, std::string("www.a.test"), Addr("198.18.0.12"), 443, {}).allowed);
  // A port-qualified deny entry denies only its port; port 0 is no real port.
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("198.18.0.13"), 443, {}).allowed);
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.13"), 80, {}).allowed);
  EXPECT_EQ(Decide(p, std::nullopt, Addr("198.18.0.13"), 0, {}).reason.find("denied by"), std::string::npos);
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.11"), 443, {}).allowed);
}

TEST(DecideTest, OpenModeDeniesWhatItsDenyEntriesName) {
  Policy p = MakePolicy("open", {"10.0.0.5"}, {"198.18.0.12", "*.evil.test", "[2001:db8:1::/64]:443", "10.0.0.0/8"});
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("198.18.0.10"), 80, {}).allowed);
  EXPECT_TRUE(Decide(p, std::string("a.test"), Addr("198.18.0.11"), 80, {}).allowed);
  EXPECT_EQ(Decide(p, std::nullopt, Addr("::ffff:198.18.0.12"), 80, {}).reason,
            "198.18.0.12:80 is denied by deny entry \"198.18.0.12\"");
  EXPECT_EQ(Decide(p, std::string("x.evil.test"), Addr("198.18.0.10"), 80, {}).reason,
            "x.evil.test:80 is denied by deny entry \"*.evil.test\"");
  EXPECT_TRUE(Decide(p, std::string("evil.test"), Addr("198.18.0.10"), 80, {}).allowed);  // not the apex
  EXPECT_FALSE(Decide(p, std::nullopt, Addr("2001:db8:1::12"), 443, {}).allowed);
  EXPECT_TRUE(Decide(p, std::nullopt, Addr("2001:db8:1::12"), 80, {}).allowed);
  // Deny is checked first: an allow entry inside a denied range does not re-open it.
  EXPECT_EQ(Decide(p, std::nullopt, Addr("10.0.0.5"), 80, {}).reason,
            "10.0.0.5:80 is denied by deny entry \"10.0.0.0/8\"");
}

TEST(DecideTest, AnInvalidNameIsReportedSafely) {
  Policy p = MakePolicy("allowlist", {"a.test"});
  Verdict v = Decide(p, std::string("a.test\x00\xff", 8), Addr("198.18.0.10"), 443, {});
  EXPECT_FALSE(v.allowed);
  for (char c : v.reason) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << v.reason;
  }
  EXPECT_NE(v.reason.find("not a valid host name"), std::string::npos) << v.reason;
  EXPECT_FALSE(Decide(p, std::string("a..test"), Addr("198.18.0.10"), 443, {}).allowed);
}

TEST(NormalizeNameTest, LowerCasesAndDropsOneTrailingDot) {
  EXPECT_EQ(NormalizeName("A.Test."), "a.test");
  EXPECT_EQ(NormalizeName("a.test"), "a.test");
  EXPECT_EQ(NormalizeName("_sip._tcp.Example.COM"), "_sip._tcp.example.com");
  EXPECT_EQ(NormalizeName("localhost"), "localhost");
  std::string label63(63, 'a');
  std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  EXPECT_EQ(NormalizeName(name253 + "."), name253);
}

TEST(NormalizeNameTest, RejectsWhatIsNotAHostName) {
  std::string label63(63, 'a');
  std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  for (const std::string& name :
       {std::string(""), std::string("."), std::string(".."), std::string("a.test.."), std::string(".a.test"),
        std::string("a..test"), std::string(64, 'a'), name253 + "b", std::string("a test"), std::string("a.test:443"),
        std::string("*.a.test"), std::string("1.2.3.4"), std::string("::1"), std::string("[::1]"),
        std::string("a.test\n"), std::string("a\0.test", 7), std::string("\xc3\xa4.test"), std::string("a/b")}) {
    EXPECT_FALSE(NormalizeName(name).has_value()) << name;
  }
}

}  // namespace
}  // namespace bulkhead::net

namespace bulkhead::net {
namespace {

TEST(DecideNameTest, ModeSyntaxAndNameEntriesDecideBeforeAnyLookup) {
  const Policy allowlist = MakePolicy("allowlist", {"a.test:443", "*.b.test", "198.18.0.5"});
  EXPECT_TRUE(DecideName(allowlist, "A.Test.", 443).allowed);
  EXPECT_TRUE(DecideName(allowlist, "a.test", 0).allowed);  // a lookup: any port
  EXPECT_EQ(DecideName(allowlist, "a.test", 80).reason, "a.test:80 is not in the allowlist");
  EXPECT_TRUE(DecideName(allowlist, "x.b.test", 8080).allowed);
  EXPECT_EQ(DecideName(allowlist, "secret.evil.test", 0).reason, "secret.evil.test is not in the allowlist");
  EXPECT_FALSE(DecideName(allowlist, "198.18.0.5", 0).allowed);  // an address is not a name
  EXPECT_FALSE(DecideName(allowlist, "bad name", 0).allowed);
  EXPECT_TRUE(DecideName(MakePolicy("open", {}), "anything.example", 0).allowed);
  EXPECT_FALSE(DecideName(MakePolicy("open", {}), "bad..name", 0).allowed);
  EXPECT_EQ(DecideName(MakePolicy("none", {}), "a.test", 443).reason, "network mode is none");
}

TEST(DecideNameTest, ADeniedNameIsNotLookedUpUnlessOnlySomePortsAreDenied) {
  for (const char* mode : {"allowlist", "open"}) {
    const Policy p = MakePolicy(mode, mode == std::string("open") ? std::vector<std::string>{}
                                                                  : std::vector<std::string>{"*.test"},
                                {"*.evil.test", "a.test:443"});
    Verdict lookup = DecideName(p, "Secret.Evil.Test", 0);
    EXPECT_FALSE(lookup.allowed) << mode;
    EXPECT_EQ(lookup.reason, "secret.evil.test is denied by deny entry \"*.evil.test\"");
    EXPECT_EQ(DecideName(p, "x.evil.test", 80).reason, "x.evil.test:80 is denied by deny entry \"*.evil.test\"");
    EXPECT_TRUE(DecideName(p, "a.test", 0).allowed) << mode;  // port 80 is still allowed
    EXPECT_TRUE(DecideName(p, "a.test", 80).allowed) << mode;
    EXPECT_EQ(DecideName(p, "a.test", 443).reason, "a.test:443 is denied by deny entry \"a.test:443\"");
    EXPECT_TRUE(DecideName(p, "b.test", 0).allowed) << mode;
  }
}

TEST(ParsePortTest, DecimalOneTo65535Only) {
  EXPECT_EQ(ParsePort("1"), 1);
  EXPECT_EQ(ParsePort("65535"), 65535);
  for (const char* bad : {"", "0", "65536", "08080", "+80", "-1", "80a", "999999"}) EXPECT_FALSE(ParsePort(bad)) << bad;
}

}  // namespace
}  // namespace bulkhead::net
