#include "net/ip_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/un.h>

#include <cstring>
#include <string>
#include <vector>

namespace bulkhead::net {
namespace {

IpAddress Addr(const char* text) {
  auto a = IpAddress::Parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress{});
}

TEST(IpAddressTest, ParsesIpv4AndPrintsItBack) {
  auto a = IpAddress::Parse("198.18.0.10");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->v6);
  EXPECT_EQ(a->bytes[0], 198);
  EXPECT_EQ(a->bytes[3], 10);
  EXPECT_EQ(a->ToString(), "198.18.0.10");
  EXPECT_EQ(Addr("0.0.0.0").ToString(), "0.0.0.0");
  EXPECT_EQ(Addr("255.255.255.255").ToString(), "255.255.255.255");
}

TEST(IpAddressTest, ParsesIpv6CanonicallyWithOrWithoutBrackets) {
  auto a = IpAddress::Parse("2001:DB8:0:0::1");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->v6);
  EXPECT_EQ(a->ToString(), "2001:db8::1");
  EXPECT_EQ(Addr("[2001:db8::1]"), *a);
  EXPECT_EQ(Addr("::1").ToString(), "::1");
  EXPECT_EQ(Addr("::").ToString(), "::");
  EXPECT_EQ(Addr("fd00:ec2::254").ToString(), "fd00:ec2::254");
}

TEST(IpAddressTest, Ipv4MappedIpv6IsTheIpv4Address) {
  for (const char* text : {"::ffff:10.0.0.5", "::FFFF:a00:5", "[::ffff:10.0.0.5]", "0:0:0:0:0:ffff:10.0.0.5"}) {
    auto a = IpAddress::Parse(text);
    ASSERT_TRUE(a) << text;
    EXPECT_FALSE(a->v6) << text;
    EXPECT_EQ(a->ToString(), "10.0.0.5") << text;
    EXPECT_EQ(*a, Addr("10.0.0.5")) << text;
  }
}

TEST(IpAddressTest, RejectsEverythingThatIsNotExactlyAnAddress) {
  for (const char* text :
       {"", " ", "1.2.3.4 ", " 1.2.3.4", "01.2.3.4", "1.2.3.04", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.-1",
        "0x7f.0.0.1", "2130706433", "[1.2.3.4]", "[::1", "::1]", "[]", "[", "fe80::1%eth0", "fe80::1%1",
        "1.2.3.4/32", "::1/128", "2001:db8:::1", "2001:db8::1::2", "12345::1", "::ffff:01.2.3.4", "localhost",
        "a.test", "1.2.3.4:80", "[::1]:80", "::1 "}) {
    EXPECT_FALSE(IpAddress::Parse(text).has_value()) << '"' << text << '"';
  }
  EXPECT_FALSE(IpAddress::Parse(std::string("1.2.3.4\0", 8)).has_value());
  EXPECT_FALSE(IpAddress::Parse(std::string(100, '1')).has_value());
}

TEST(IpAddressTest, FromSockaddrReadsBothFamiliesAndUnmapsIpv4) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(80);
  ASSERT_EQ(inet_pton(AF_INET, "198.18.0.11", &in.sin_addr), 1);
  EXPECT_EQ(IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&in)), Addr("198.18.0.11"));

  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  ASSERT_EQ(inet_pton(AF_INET6, "2001:db8:1::10", &in6.sin6_addr), 1);
  EXPECT_EQ(IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&in6)), Addr("2001:db8:1::10"));

  ASSERT_EQ(inet_pton(AF_INET6, "::ffff:169.254.169.254", &in6.sin6_addr), 1);
  IpAddress mapped = IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&in6));
  EXPECT_FALSE(mapped.v6);
  EXPECT_EQ(mapped.ToString(), "169.254.169.254");
}

TEST(IpAddressTest, FromSockaddrOfAnotherFamilyIsTheUnspecifiedAddress) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  IpAddress a = IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&un));
  EXPECT_EQ(a, IpAddress{});
  EXPECT_EQ(a.ToString(), "0.0.0.0");
  EXPECT_EQ(IpAddress::FromSockaddr(nullptr), IpAddress{});
}

TEST(IpAddressTest, ToSockaddrRoundTripsWithPort) {
  for (const char* text : {"198.18.0.10", "2001:db8:1::10"}) {
    IpAddress a = Addr(text);
    sockaddr_storage storage;
    std::memset(&storage, 0xaa, sizeof storage);
    socklen_t length = a.ToSockaddr(443, &storage);
    EXPECT_EQ(length, a.v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    EXPECT_EQ(storage.ss_family, a.v6 ? AF_INET6 : AF_INET);
    uint16_t port = a.v6 ? reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port
                         : reinterpret_cast<sockaddr_in*>(&storage)->sin_port;
    EXPECT_EQ(ntohs(port), 443);
    if (a.v6) {
      EXPECT_EQ(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_scope_id, 0u);
      EXPECT_EQ(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_flowinfo, 0u);
    }
    EXPECT_EQ(IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&storage)), a);
  }
}

TEST(IpAddressTest, OrdersV4BeforeV6AndByBytes) {
  EXPECT_LT(Addr("1.2.3.4"), Addr("1.2.3.5"));
  EXPECT_LT(Addr("255.255.255.255"), Addr("::"));
  EXPECT_NE(Addr("0.0.0.1"), Addr("::1"));
}

TEST(IpPrefixTest, ParsesPrefixesAndBareAddresses) {
  auto p = IpPrefix::Parse("10.0.0.0/8");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->length, 8);
  EXPECT_EQ(p->ToString(), "10.0.0.0/8");
  auto bare = IpPrefix::Parse("1.2.3.4");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->length, 32);
  EXPECT_EQ(bare->ToString(), "1.2.3.4/32");
  auto v6 = IpPrefix::Parse("FD00::/8");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->ToString(), "fd00::/8");
  auto v6bare = IpPrefix::Parse("2001:db8::1");
  ASSERT_TRUE(v6bare);
  EXPECT_EQ(v6bare->length, 128);
  EXPECT_EQ(IpPrefix::Parse("0.0.0.0/0")->length, 0);
  EXPECT_EQ(IpPrefix::Parse("::/0")->length, 0);
}

TEST(IpPrefixTest, HostBitsSetAreAnErrorNotAWiderRule) {
  for (const char* text : {"10.0.0.1/8", "11.0.0.0/7", "192.168.1.0/16", "1.2.3.5/31", "fd00::1/8", "2001:db9::/31",
                           "0.0.0.1/0", "::1/127", "::ffff:10.0.0.1/104"}) {
    EXPECT_FALSE(IpPrefix::Parse(text).has_value()) << text;
  }
  // The last kept bit may be anything; only the bits after the length must be zero.
  for (const char* text : {"1.2.3.4/32", "1.2.3.4/30", "10.0.0.0/7", "1.2.3.4/31", "2001:db8::/31", "::1/128"}) {
    EXPECT_TRUE(IpPrefix::Parse(text).has_value()) << text;
  }
}

TEST(IpPrefixTest, ParseMaskedClearsHostBitsAsGoDoes) {
  EXPECT_EQ(IpPrefix::ParseMasked("10.0.0.1/8")->ToString(), "10.0.0.0/8");
  EXPECT_EQ(IpPrefix::ParseMasked("1.2.3.5/31")->ToString(), "1.2.3.4/31");
  EXPECT_EQ(IpPrefix::ParseMasked("fd00::1/8")->ToString(), "fd00::/8");
  EXPECT_EQ(IpPrefix::ParseMasked("::ffff:10.0.0.1/104")->ToString(), "10.0.0.0/8");
  EXPECT_EQ(IpPrefix::ParseMasked("1.2.3.4")->ToString(), "1.2.3.4/32");
  for (const char* text : {"10.0.0.0/33", "10.0.0.0/", "a.test/8", "[fd00::]/8", ""}) {
    EXPECT_FALSE(IpPrefix::ParseMasked(text).has_value()) << text;
  }
}

std::string Pieces(const char* from, const std::vector<const char*>& holes, size_t max_count = 1000) {
  std::vector<IpPrefix> parsed;
  for (const char* hole : holes) parsed.push_back(*IpPrefix::Parse(hole));
  auto left = SubtractPrefixes(*IpPrefix::Parse(from), parsed, max_count);
  if (!left) return "too many";
  std::string out;
  for (const IpPrefix& piece : *left) out += (out.empty() ? "" : " ") + piece.ToString();
  return out;
}

TEST(SubtractPrefixesTest, LeavesTheFewestPrefixesLowestFirst) {
  EXPECT_EQ(Pieces("198.51.100.0/24", {}), "198.51.100.0/24");
  EXPECT_EQ(Pieces("198.51.100.0/24", {"203.0.113.0/24", "2001:db8::/32"}), "198.51.100.0/24");
  EXPECT_EQ(Pieces("198.51.100.0/24", {"198.51.0.0/16"}), "");
  EXPECT_EQ(Pieces("198.51.100.7", {"198.51.100.7"}), "");
  EXPECT_EQ(Pieces("198.51.100.0/30", {"198.51.100.1"}), "198.51.100.0/32 198.51.100.2/31");
  EXPECT_EQ(Pieces("198.51.100.0/24", {"198.51.100.128/25", "198.51.100.0/26"}), "198.51.100.64/26");
  EXPECT_EQ(Pieces("2001:db8::/126", {"2001:db8::3"}), "2001:db8::/127 2001:db8::2/128");
  // A /32 hole in 0.0.0.0/0 leaves 32 pieces: more than the limit is refused, not cut short.
  EXPECT_EQ(Pieces("0.0.0.0/0", {"198.51.100.7"}, 32).substr(0, 9), "0.0.0.0/1");
  EXPECT_EQ(Pieces("0.0.0.0/0", {"198.51.100.7"}, 31), "too many");
}

TEST(IpPrefixTest, RejectsBadLengthsAndSyntax) {
  for (const char* text : {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/-1", "10.0.0.0/+8",
                           "10.0.0.0/8/8", "10.0.0.0/ 8", "10.0.0.0/1000", "/8", "", "[fd00::]/8", "[fd00::/8]",
                           "a.test/8", "01.0.0.0/8"}) {
    EXPECT_FALSE(IpPrefix::Parse(text).has_value()) << text;
  }
}

TEST(IpPrefixTest, MappedPrefixBecomesTheIpv4Prefix) {
  auto p = IpPrefix::Parse("::ffff:10.0.0.0/104");
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->address.v6);
  EXPECT_EQ(p->ToString(), "10.0.0.0/8");
  EXPECT_EQ(IpPrefix::Parse("::ffff:1.2.3.4")->ToString(), "1.2.3.4/32");
  // Shorter than /96 would reach beyond the mapped range: not expressible as IPv4.
  EXPECT_FALSE(IpPrefix::Parse("::ffff:0.0.0.0/95"));
  EXPECT_FALSE(IpPrefix::Parse("::ffff:0.0.0.0/129"));
}

TEST(IpPrefixTest, ContainsChecksFamilyAndBitsIncludingUnalignedEdges) {
  auto cgnat = *IpPrefix::Parse("100.64.0.0/10");
  EXPECT_TRUE(cgnat.Contains(Addr("100.64.0.0")));
  EXPECT_TRUE(cgnat.Contains(Addr("100.127.255.255")));
  EXPECT_FALSE(cgnat.Contains(Addr("100.63.255.255")));
  EXPECT_FALSE(cgnat.Contains(Addr("100.128.0.0")));
  EXPECT_FALSE(cgnat.Contains(Addr("::ffff:100.63.0.1")));
  EXPECT_TRUE(cgnat.Contains(Addr("::ffff:100.65.0.1")));

  auto all4 = *IpPrefix::Parse("0.0.0.0/0");
  EXPECT_TRUE(all4.Contains(Addr("255.255.255.255")));
  EXPECT_FALSE(all4.Contains(Addr("::1")));
  auto all6 = *IpPrefix::Parse("::/0");
  EXPECT_TRUE(all6.Contains(Addr("ffff::1")));
  EXPECT_FALSE(all6.Contains(Addr("1.2.3.4")));

  auto ula = *IpPrefix::Parse("fc00::/7");
  EXPECT_TRUE(ula.Contains(Addr("fd00:ec2::254")));
  EXPECT_TRUE(ula.Contains(Addr("fc00::")));
  EXPECT_FALSE(ula.Contains(Addr("fe00::")));
  EXPECT_FALSE(ula.Contains(Addr("fbff:ffff::")));

  auto host = *IpPrefix::Parse("10.1.2.3");
  EXPECT_TRUE(host.Contains(Addr("10.1.2.3")));
  EXPECT_FALSE(host.Contains(Addr("10.1.2.4")));
}

}  // namespace
}  // namespace bulkhead::net
