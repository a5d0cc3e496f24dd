#include "net/dns_message.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace bulkhead::net::dns {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out += static_cast<char>(b);
  return out;
}
std::string U16(int v) { return Bytes({(v >> 8) & 0xff, v & 0xff}); }
std::string U32(uint32_t v) { return U16(static_cast<int>(v >> 16)) + U16(static_cast<int>(v & 0xffff)); }
std::string Header(int id, int flags, int qd, int an = 0, int ns = 0, int ar = 0) {
  return U16(id) + U16(flags) + U16(qd) + U16(an) + U16(ns) + U16(ar);
}
// "a.test" -> "\1a\4test\0"
std::string Wire(const std::string& dotted) {
  std::string out;
  size_t start = 0;
  while (start < dotted.size()) {
    size_t dot = dotted.find('.', start);
    if (dot == std::string::npos) dot = dotted.size();
    out += static_cast<char>(dot - start);
    out += dotted.substr(start, dot - start);
    start = dot + 1;
  }
  return out + '\0';
}
std::string Record(const std::string& owner_wire, int type, uint32_t ttl, const std::string& rdata) {
  return owner_wire + U16(type) + U16(kClassIn) + U32(ttl) + U16(static_cast<int>(rdata.size())) + rdata;
}

TEST(DnsQueryTest, BuildQueryWritesTheWireFormat) {
  std::string q = BuildQuery(0x1234, "a.test", kTypeA);
  EXPECT_EQ(q, Header(0x1234, 0x0100, 1) + Bytes({1, 'a', 4, 't', 'e', 's', 't', 0}) + U16(1) + U16(1));
  EXPECT_EQ(BuildQuery(0x1234, "a.test.", kTypeA), q);
  EXPECT_EQ(BuildQuery(7, "", kTypeAny), Header(7, 0x0100, 1) + Bytes({0}) + U16(255) + U16(1));
  EXPECT_EQ(BuildQuery(7, ".", kTypeAny), BuildQuery(7, "", kTypeAny));
}

TEST(DnsQueryTest, BuildQueryRefusesNamesTheWireCannotCarry) {
  EXPECT_EQ(BuildQuery(1, "a..test", kTypeA), "");
  EXPECT_EQ(BuildQuery(1, ".a.test", kTypeA), "");
  EXPECT_EQ(BuildQuery(1, "a.test..", kTypeA), "");
  EXPECT_EQ(BuildQuery(1, std::string(64, 'a') + ".test", kTypeA), "");
  EXPECT_NE(BuildQuery(1, std::string(63, 'a') + ".test", kTypeA), "");
  // 255 bytes on the wire at most: four 62-byte labels are 4*63+1 = 253 bytes, one more is too many.
  std::string l62(62, 'x');
  std::string fits = l62 + "." + l62 + "." + l62 + "." + l62;
  EXPECT_NE(BuildQuery(1, fits, kTypeA), "");
  EXPECT_NE(BuildQuery(1, fits + ".a", kTypeA), "");  // 255 exactly
  EXPECT_EQ(BuildQuery(1, fits + ".ab", kTypeA), "");
  EXPECT_EQ(BuildQuery(1, "a\\", kTypeA), "");
  EXPECT_EQ(BuildQuery(1, "a\\25", kTypeA), "");
  EXPECT_EQ(BuildQuery(1, "a\\256", kTypeA), "");
}

TEST(DnsQueryTest, ParseQueryReadsTheQuestionKeepingCase) {
  std::string packet = Header(0xbeef, 0x0100, 1) + Wire("A.Test") + U16(kTypeAaaa) + U16(kClassIn);
  auto q = ParseQuery(packet);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->id, 0xbeef);
  EXPECT_EQ(q->flags, 0x0100);
  EXPECT_EQ(q->name, "A.Test");
  EXPECT_EQ(q->type, kTypeAaaa);
  EXPECT_EQ(q->qclass, kClassIn);

  auto round = ParseQuery(BuildQuery(9, "x.b.test", kTypeTxt));
  ASSERT_TRUE(round);
  EXPECT_EQ(round->name, "x.b.test");
  EXPECT_EQ(round->type, kTypeTxt);

  auto root = ParseQuery(BuildQuery(9, "", kTypeA));
  ASSERT_TRUE(root);
  EXPECT_EQ(root->name, "");
}

TEST(DnsQueryTest, ParseQueryAcceptsAnEdnsRecordAfterTheQuestion) {
  std::string opt = Bytes({0}) + U16(41) + U16(1232) + U32(0) + U16(0);
  std::string packet = Header(1, 0x0120, 1, 0, 0, 1) + Wire("a.test") + U16(kTypeA) + U16(kClassIn) + opt;
  auto q = ParseQuery(packet);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->name, "a.test");
}

TEST(DnsQueryTest, ParseQueryRejectsWhatIsNotOneStandardQuery) {
  std::string question = Wire("a.test") + U16(kTypeA) + U16(kClassIn);
  EXPECT_TRUE(ParseQuery(Header(1, 0x0100, 1) + question));
  EXPECT_FALSE(ParseQuery(Header(1, 0x8100, 1) + question));       // QR=1: a response
  EXPECT_FALSE(ParseQuery(Header(1, 0x0100, 0) + question));       // no question
  EXPECT_FALSE(ParseQuery(Header(1, 0x0100, 2) + question + question));
  EXPECT_FALSE(ParseQuery(Header(1, 0x0900, 1) + question));       // opcode 1 (IQUERY)
  EXPECT_FALSE(ParseQuery(Header(1, 0x1100, 1) + question));       // opcode 2 (STATUS)
  EXPECT_FALSE(ParseQuery(Header(1, 0x2800, 1) + question));       // opcode 5 (UPDATE)
  EXPECT_FALSE(ParseQuery(""));
  EXPECT_FALSE(ParseQuery(Header(1, 0x0100, 1)));
}

TEST(DnsQueryTest, EveryTruncationOfAQueryIsRejected) {
  std::string packet = BuildQuery(1, "www.a.test", kTypeA);
  ASSERT_TRUE(ParseQuery(packet));
  for (size_t n = 0; n < packet.size(); ++n) {
    EXPECT_FALSE(ParseQuery(packet.substr(0, n))) << n;
  }
}

TEST(DnsQueryTest, CompressionPointersCannotLoopOrPointForward) {
  std::string tail = U16(kTypeA) + U16(kClassIn);
  // A pointer to itself (offset 12).
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({0xc0, 12}) + tail));
  // A label, then a pointer back to that label: a loop.
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({1, 'a', 0xc0, 12}) + tail));
  // Forward, past the end, and into the header's middle bytes that form a loop.
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({0xc0, 14, 0}) + tail));
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({0xff, 0xff}) + tail));
  // The pointer byte alone at the end.
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({1, 'a', 0xc0})));
  // Two pointers that point at each other.
  std::string two = Header(1, 0, 1) + Bytes({0xc0, 14, 0xc0, 12}) + tail;
  EXPECT_FALSE(ParseQuery(two));
  // Obsolete label types 0x40 and 0x80.
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({0x40, 'a', 0}) + tail));
  EXPECT_FALSE(ParseQuery(Header(1, 0, 1) + Bytes({0x80, 'a', 0}) + tail));
}

TEST(DnsQueryTest, ABackwardPointerIntoTheHeaderIsFollowedSafely) {
  // The id 0x0161 reads as a label "\1a" then the flags' 0x00 ends the name: "a". Odd but bounded.
  std::string packet = Header(0x0161, 0x0000, 1) + Bytes({0xc0, 0}) + U16(kTypeA) + U16(kClassIn);
  auto q = ParseQuery(packet);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->name, "a");
}

TEST(DnsQueryTest, NamesLongerThan255BytesAreRejected) {
  std::string l63(63, 'x');
  std::string tail = U16(kTypeA) + U16(kClassIn);
  // 4 labels of 63: 4*64 + 1 = 257 bytes.
  std::string too_long = Header(1, 0, 1) + Wire(l63 + "." + l63 + "." + l63 + "." + l63) + tail;
  EXPECT_FALSE(ParseQuery(too_long));
  std::string l62(62, 'x');
  std::string max = Header(1, 0, 1) + Wire(l62 + "." + l62 + "." + l62 + "." + l62 + ".a") + tail;
  EXPECT_TRUE(ParseQuery(max));
  // Compression cannot build a longer name either: questions that each add a 63-byte label
  // in front of the previous one. Three make 193 bytes; the fourth would be 257.
  std::string packet = Header(1, 0x8180, 3);
  size_t previous = 0;
  for (int i = 0; i < 4; ++i) {
    size_t start = packet.size();
    packet += static_cast<char>(63) + l63;
    packet += i == 0 ? Bytes({0}) : Bytes({0xc0 | static_cast<int>(previous >> 8), static_cast<int>(previous & 0xff)});
    packet += tail;
    previous = start;
  }
  EXPECT_TRUE(ParseAnswer(packet));
  packet[5] = 4;  // QDCOUNT 4
  EXPECT_FALSE(ParseAnswer(packet));
}

TEST(DnsQueryTest, UnusualBytesInLabelsAreEscapedUnambiguously) {
  // One label "a.b" and one label with a NUL and a space: not the three labels "a", "b", ...
  std::string packet = Header(1, 0x0100, 1) + Bytes({3, 'a', '.', 'b', 3, 0, ' ', '\\', 0}) + U16(kTypeA) +
                       U16(kClassIn);
  auto q = ParseQuery(packet);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->name, "a\\046b.\\000\\032\\092");
  // The reply carries exactly the question that was asked.
  std::string reply = ErrorReply(*q, kRcodeRefused);
  EXPECT_EQ(reply.substr(12), packet.substr(12));
  // And a query built from the escaped name is the same question.
  EXPECT_EQ(BuildQuery(1, q->name, kTypeA), packet);
}

TEST(DnsReplyTest, ErrorReplyCopiesIdRdAndQuestion) {
  std::string packet = Header(0x4242, 0x0100, 1) + Wire("Other.Test") + U16(kTypeTxt) + U16(kClassIn);
  auto q = ParseQuery(packet);
  ASSERT_TRUE(q);
  std::string reply = ErrorReply(*q, kRcodeNxDomain);
  EXPECT_EQ(reply, Header(0x4242, 0x8183, 1) + Wire("Other.Test") + U16(kTypeTxt) + U16(kClassIn));

  auto no_rd = ParseQuery(Header(5, 0x0000, 1) + Wire("a.test") + U16(kTypeA) + U16(kClassIn));
  ASSERT_TRUE(no_rd);
  std::string servfail = ErrorReply(*no_rd, kRcodeServFail);
  EXPECT_EQ(servfail.substr(0, 4), U16(5) + U16(0x8082));

  auto answer = ParseAnswer(reply);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->id, 0x4242);
  EXPECT_EQ(answer->rcode, kRcodeNxDomain);
  EXPECT_TRUE(answer->addresses.empty());
}

TEST(DnsAnswerTest, ReadsAAndAaaaRecordsFollowingCompression) {
  std::string question = Wire("A.test") + U16(kTypeA) + U16(kClassIn);
  std::string packet =
      Header(0x77, 0x8180, 1, 5) + question +
      Record(Bytes({0xc0, 12}), kTypeCname, 60, Wire("cdn.b.test")) +
      Record(Bytes({0xc0, 12}), kTypeA, 300, Bytes({198, 18, 0, 10})) +
      Record(Bytes({3, 'W', 'W', 'W', 0xc0, 12}), kTypeAaaa, 30,
             Bytes({0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10})) +
      Record(Bytes({0xc0, 12}), kTypeAaaa, 0x80000000u, Bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 5})) +
      Record(Bytes({0xc0, 12}), kTypeTxt, 5, Bytes({3, 'x', 'y', 'z'}));
  auto answer = ParseAnswer(packet);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->id, 0x77);
  EXPECT_EQ(answer->rcode, kRcodeNoError);
  EXPECT_FALSE(answer->truncated);
  ASSERT_EQ(answer->addresses.size(), 3u);
  EXPECT_EQ(answer->addresses[0].name, "a.test");
  EXPECT_EQ(answer->addresses[0].address.ToString(), "198.18.0.10");
  EXPECT_EQ(answer->addresses[0].ttl, 300u);
  EXPECT_EQ(answer->addresses[1].name, "www.a.test");
  EXPECT_EQ(answer->addresses[1].address.ToString(), "2001:db8:1::10");
  EXPECT_EQ(answer->addresses[1].ttl, 30u);
  // A mapped AAAA is the IPv4 address it carries; a TTL with the top bit set counts as 0.
  EXPECT_FALSE(answer->addresses[2].address.v6);
  EXPECT_EQ(answer->addresses[2].address.ToString(), "10.0.0.5");
  EXPECT_EQ(answer->addresses[2].ttl, 0u);
}

TEST(DnsAnswerTest, RejectsQueriesAndMalformedRecords) {
  std::string question = Wire("a.test") + U16(kTypeA) + U16(kClassIn);
  std::string a_record = Record(Bytes({0xc0, 12}), kTypeA, 60, Bytes({1, 2, 3, 4}));
  EXPECT_TRUE(ParseAnswer(Header(1, 0x8180, 1, 1) + question + a_record));
  EXPECT_FALSE(ParseAnswer(Header(1, 0x0100, 1, 1) + question + a_record));  // QR=0
  EXPECT_FALSE(ParseAnswer(Header(1, 0x8180, 1, 1) + question +
                           Record(Bytes({0xc0, 12}), kTypeA, 60, Bytes({1, 2, 3, 4, 5}))));
  EXPECT_FALSE(ParseAnswer(Header(1, 0x8180, 1, 1) + question +
                           Record(Bytes({0xc0, 12}), kTypeAaaa, 60, Bytes({1, 2, 3, 4}))));
  EXPECT_FALSE(ParseAnswer(Header(1, 0x8180, 1, 2) + question + a_record));  // claims two answers
  EXPECT_FALSE(ParseAnswer(Header(1, 0x8180, 1, 1) + question +
                           Record(Bytes({0xc0, 30}), kTypeA, 60, Bytes({1, 2, 3, 4}))));  // forward pointer
  EXPECT_FALSE(ParseAnswer(Header(1, 0x8180, 1, 1) + question + Bytes({0xc0, 24}) + U16(kTypeA)));  // self loop
  EXPECT_FALSE(ParseAnswer("\x12"));
}

TEST(DnsAnswerTest, EveryTruncationOfAnAnswerIsRejectedUnlessMarkedTruncated) {
  std::string question = Wire("a.test") + U16(kTypeA) + U16(kClassIn);
  std::string records = Record(Bytes({0xc0, 12}), kTypeA, 60, Bytes({198, 18, 0, 10})) +
                        Record(Bytes({0xc0, 12}), kTypeA, 60, Bytes({198, 18, 0, 11}));
  std::string packet = Header(1, 0x8180, 1, 2) + question + records;
  ASSERT_TRUE(ParseAnswer(packet));
  for (size_t n = 0; n < packet.size(); ++n) {
    EXPECT_FALSE(ParseAnswer(packet.substr(0, n))) << n;
  }
  // With TC set, a cut reply yields what was whole, marked truncated.
  std::string truncated = Header(1, 0x8380, 1, 2) + question + records;
  size_t cut = truncated.size() - 3;
  auto partial = ParseAnswer(truncated.substr(0, cut));
  ASSERT_TRUE(partial);
  EXPECT_TRUE(partial->truncated);
  ASSERT_EQ(partial->addresses.size(), 1u);
  EXPECT_EQ(partial->addresses[0].address.ToString(), "198.18.0.10");
}

TEST(DnsIdTest, MessageIdAndWithId) {
  std::string q = BuildQuery(0xabcd, "a.test", kTypeA);
  EXPECT_EQ(MessageId(q), 0xabcd);
  std::string moved = WithId(q, 0x0102);
  EXPECT_EQ(MessageId(moved), 0x0102);
  EXPECT_EQ(moved.substr(2), q.substr(2));
  EXPECT_FALSE(MessageId("x"));
  EXPECT_FALSE(MessageId(""));
  EXPECT_EQ(WithId("x", 5), "x");
}

// Hostile input of every shape: mutating each byte of real packets to every value, and random
// packets. Nothing may crash (ASan/UBSan builds catch overreads), and every query that parses
// must survive the escape round trip: BuildQuery of its name asks the same question.
TEST(DnsHostileInputTest, MutatedAndRandomPacketsNeverBreakTheParsers) {
  std::string query = BuildQuery(1, "www.a.test", kTypeA);
  std::string answer = Header(1, 0x8180, 1, 1) + Wire("a.test") + U16(kTypeA) + U16(kClassIn) +
                       Record(Bytes({0xc0, 12}), kTypeA, 60, Bytes({1, 2, 3, 4}));
  auto check = [](const std::string& packet) {
    if (auto q = ParseQuery(packet)) {
      EXPECT_LE(q->name.size(), 255u * 4);
      std::string rebuilt = BuildQuery(q->id, q->name, q->type);
      ASSERT_FALSE(rebuilt.empty()) << q->name;
      auto again = ParseQuery(rebuilt);
      ASSERT_TRUE(again);
      EXPECT_EQ(again->name, q->name);
    }
    if (auto a = ParseAnswer(packet)) {
      EXPECT_LE(a->addresses.size(), packet.size() / 11);
    }
  };
  for (const std::string& base : {query, answer}) {
    for (size_t i = 0; i < base.size(); ++i) {
      for (int v = 0; v < 256; ++v) {
        std::string mutated = base;
        mutated[i] = static_cast<char>(v);
        check(mutated);
      }
    }
  }
  std::mt19937 random(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string packet(12 + random() % 64, '\0');
    for (char& c : packet) c = static_cast<char>(random());
    packet[2] = static_cast<char>(packet[2] & 0x87);  // opcode 0, so some parse as queries
    check(packet);
  }
}

}  // namespace
}  // namespace bulkhead::net::dns
