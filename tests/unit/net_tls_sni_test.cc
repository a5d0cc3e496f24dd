#include "net/tls_sni.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace bulkhead::net {
namespace {

// Real ClientHellos, each the first flight of a real client, captured by a listener on
// 127.0.0.1 that recorded the bytes it received:
//   openssl s_client -servername a.test -connect 127.0.0.1:PORT           (TLS 1.3, OpenSSL 3.0)
//   openssl s_client -noservername -connect 127.0.0.1:PORT
//   curl -k --resolve a.test:PORT:127.0.0.1 https://a.test:PORT/           (curl 7.88, ALPN h2)
//   openssl s_client -tls1_2 -servername B.Test -connect 127.0.0.1:PORT
constexpr const char* kOpensslHelloATest =
    "16030101330100012f030316d74109d46f427a2576b8ba4b582b7e1538b398193f4d889244e33623ee61fc20ff2bf963"
    "8b203774053b7ef15ddc8f24af266b15c3bdf24a498084ffd1e48cfa003e130213031301c02cc030009fcca9cca8ccaa"
    "c02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff010000a8"
    "0000000b0009000006612e74657374000b000403000102000a00160014001d0017001e00190018010001010102010301"
    "04002300000016000000170000000d002a0028040305030603080708080809080a080b08040805080604010501060103"
    "0303010302040205020602002b0009080304030303020301002d00020101003300260024001d0020fb4f5aa389282e88"
    "701c9acd78c2fe8637dce33e58fd78b6074e57f1d0177b66";
constexpr const char* kOpensslHelloNoServerName =
    "16030101240100012003036f861c7ed00cc31d130ca1107d9841d38042001186825ca169d25fc2323f50c32064d5bd40"
    "2419d6359a7736b3419f9e4aaaae51b04d02673758d6a4494d14c663003e130213031301c02cc030009fcca9cca8ccaa"
    "c02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff01000099"
    "000b000403000102000a00160014001d0017001e0019001801000101010201030104002300000016000000170000000d"
    "002a0028040305030603080708080809080a080b080408050806040105010601030303010302040205020602002b0009"
    "080304030303020301002d00020101003300260024001d0020a7a50b17318abee89255463fada69ef464f83812be8e3e"
    "f30f0398b20e098321";
constexpr const char* kCurlHelloATest =
    "1603010200010001fc0303f432bead5b7d4262271cc3e322d7c5bd7974db85dc25ce3b0315b2d929d28d7920feee9650"
    "418f75e1ddcc07a5b695bff80416010d7981d150255736f925c4e9b6003e130213031301c02cc030009fcca9cca8ccaa"
    "c02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff01000175"
    "0000000b0009000006612e74657374000b000403000102000a00160014001d0017001e00190018010001010102010301"
    "040010000e000c02683208687474702f312e31001600000017000000310000000d002a00280403050306030807080808"
    "09080a080b080408050806040105010601030303010302040205020602002b0009080304030303020301002d00020101"
    "003300260024001d0020b43a2dce9f2bc580dd61585341a70c178519af878ddf42eb4e64beb7f9444a15001500b70000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000000000000";
constexpr const char* kOpensslTls12HelloUpperCase =
    "16030100c6010000c20303e52255b0b1aa4e186cc1bb310acccb7964f326faf017b9acfe59736a5d5be435000038c02c"
    "c030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c"
    "0035002f00ff010000610000000b0009000006422e54657374000b000403000102000a000c000a001d0017001e001900"
    "18002300000016000000170000000d002a0028040305030603080708080809080a080b08040805080604010501060103"
    "0303010302040205020602";

std::string FromHex(const char* hex) {
  std::string out;
  for (size_t i = 0; hex[i] && hex[i + 1]; i += 2) out += static_cast<char>(std::stoi(std::string(hex + i, 2), nullptr, 16));
  return out;
}

std::string U16(size_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)}; }
std::string U24(size_t v) { return static_cast<char>(v >> 16) + U16(v & 0xffff); }

// The handshake message inside a captured single-record hello.
std::string HandshakeOf(const std::string& record) { return record.substr(5); }

// `handshake` framed as handshake records of at most `size` payload bytes each.
std::string Records(const std::string& handshake, size_t size) {
  std::string out;
  for (size_t at = 0; at < handshake.size(); at += size) {
    std::string part = handshake.substr(at, size);
    out += "\x16\x03\x01" + U16(part.size()) + part;
  }
  return out;
}

// Synthetic hellos for the hostile variants (the valid shape is checked against the real
// captures above).
std::string Extension(int type, const std::string& data) { return U16(type) + U16(data.size()) + data; }
std::string ServerName(const std::vector<std::pair<int, std::string>>& names) {
  std::string list;
  for (const auto& [type, name] : names) list += static_cast<char>(type) + U16(name.size()) + name;
  return Extension(0, U16(list.size()) + list);
}
std::string HelloBody(const std::string& extensions, int session_id_length = 32) {
  std::string body = "\x03\x03" + std::string(32, 'r');
  body += static_cast<char>(session_id_length) + std::string(session_id_length, 's');
  body += U16(4) + std::string("\x13\x01\x13\x02", 4);
  body += std::string("\x01\x00", 2);
  body += U16(extensions.size()) + extensions;
  return body;
}
std::string Handshake(const std::string& body, int type = 1) { return static_cast<char>(type) + U24(body.size()) + body; }
std::string Hello(const std::string& extensions) { return Records(Handshake(HelloBody(extensions)), 16384); }

SniffResult Sniff(const std::string& data) { return SniffClientHello(data); }

TEST(SniffTlsTest, RealOpensslHelloCarriesItsServerName) {
  SniffResult r = Sniff(FromHex(kOpensslHelloATest));
  EXPECT_EQ(r.kind, Sniff::kTls);
  EXPECT_EQ(r.name, "a.test");
  EXPECT_TRUE(r.method.empty());
}

TEST(SniffTlsTest, RealHelloWithoutServerNameHasNoName) {
  SniffResult r = Sniff(FromHex(kOpensslHelloNoServerName));
  EXPECT_EQ(r.kind, Sniff::kTls);
  EXPECT_FALSE(r.name.has_value());
}

TEST(SniffTlsTest, RealCurlAndTls12HellosGiveTheNameAsSent) {
  SniffResult curl = Sniff(FromHex(kCurlHelloATest));
  EXPECT_EQ(curl.kind, Sniff::kTls);
  EXPECT_EQ(curl.name, "a.test");
  SniffResult tls12 = Sniff(FromHex(kOpensslTls12HelloUpperCase));
  EXPECT_EQ(tls12.kind, Sniff::kTls);
  EXPECT_EQ(tls12.name, "B.Test");
}

TEST(SniffTlsTest, EveryPrefixOfAHelloAsksForMore) {
  for (const char* hex : {kOpensslHelloATest, kCurlHelloATest}) {
    std::string hello = FromHex(hex);
    for (size_t n = 0; n < hello.size(); ++n) {
      EXPECT_EQ(Sniff(hello.substr(0, n)).kind, Sniff::kNeedMore) << n;
    }
  }
}

TEST(SniffTlsTest, AHelloSplitByteByByteOverRecordsIsRead) {
  std::string framed = Records(HandshakeOf(FromHex(kOpensslHelloATest)), 1);
  SniffResult r = Sniff(framed);
  EXPECT_EQ(r.kind, Sniff::kTls);
  EXPECT_EQ(r.name, "a.test");
  for (size_t n = 0; n < framed.size(); ++n) {
    ASSERT_EQ(Sniff(framed.substr(0, n)).kind, Sniff::kNeedMore) << n;
  }
}

TEST(SniffTlsTest, AHelloSplitAnywhereIntoTwoRecordsIsRead) {
  std::string handshake = HandshakeOf(FromHex(kCurlHelloATest));
  for (size_t k = 1; k < handshake.size(); ++k) {
    std::string framed = "\x16\x03\x01" + U16(k) + handshake.substr(0, k) + "\x16\x03\x01" +
                         U16(handshake.size() - k) + handshake.substr(k);
    SniffResult r = Sniff(framed);
    ASSERT_EQ(r.kind, Sniff::kTls) << k;
    EXPECT_EQ(r.name, "a.test") << k;
  }
}

TEST(SniffTlsTest, BytesAfterTheHelloAreNotLookedAt) {
  std::string data = FromHex(kOpensslHelloATest) + "\x17\x03\x03" + U16(3) + "abc";
  SniffResult r = Sniff(data);
  EXPECT_EQ(r.kind, Sniff::kTls);
  EXPECT_EQ(r.name, "a.test");
}

TEST(SniffTlsTest, SyntheticHelloMatchesTheRealShape) {
  SniffResult r = Sniff(Hello(Extension(10, "\x00\x02\x00\x1d") + ServerName({{0, "x.a.test"}})));
  EXPECT_EQ(r.kind, Sniff::kTls);
  EXPECT_EQ(r.name, "x.a.test");
  SniffResult no_extensions = Sniff(Records(Handshake(HelloBody("").substr(0, HelloBody("").size() - 2)), 100));
  EXPECT_EQ(no_extensions.kind, Sniff::kTls);
  EXPECT_FALSE(no_extensions.name.has_value());
  // Unknown name types are skipped; the host_name is what counts.
  SniffResult other_type = Sniff(Hello(ServerName({{7, "zzz"}, {0, "a.test"}})));
  EXPECT_EQ(other_type.kind, Sniff::kTls);
  EXPECT_EQ(other_type.name, "a.test");
}

TEST(SniffTlsTest, AmbiguousOrMalformedServerNamesAreOther) {
  std::vector<std::pair<const char*, std::string>> cases = {
      {"two server_name extensions", Hello(ServerName({{0, "a.test"}}) + ServerName({{0, "other.test"}}))},
      {"two host names", Hello(ServerName({{0, "a.test"}, {0, "other.test"}}))},
      {"empty host name", Hello(ServerName({{0, ""}}))},
      {"control byte", Hello(ServerName({{0, std::string("a.test\0", 7)}}))},
      {"space", Hello(ServerName({{0, "a test"}}))},
      {"non-ASCII", Hello(ServerName({{0, "\xc3\xa4.test"}}))},
      {"empty list", Hello(Extension(0, U16(0)))},
      {"empty extension", Hello(Extension(0, ""))},
      {"list longer than extension", Hello(Extension(0, U16(20) + std::string("\x00\x00\x06" "a.test", 9)))},
      {"name longer than list", Hello(Extension(0, U16(9) + std::string("\x00\x00\x09" "a.test", 9)))},
  };
  for (const auto& [what, data] : cases) {
    EXPECT_EQ(Sniff(data).kind, Sniff::kOther) << what;
  }
}

TEST(SniffTlsTest, MalformedHellosAreOther) {
  std::string good = HandshakeOf(FromHex(kOpensslHelloATest));
  std::string ext = ServerName({{0, "a.test"}});
  std::vector<std::pair<const char*, std::string>> cases = {
      {"alert record first", "\x15\x03\x01" + U16(good.size()) + good},
      {"application data record", "\x17\x03\x03" + U16(good.size()) + good},
      {"record version 2", "\x16\x02\x01" + U16(good.size()) + good},
      {"empty record", "\x16\x03\x01" + U16(0) + Records(good, 16384)},
      {"record over 2^14", "\x16\x03\x01" + U16(16385) + std::string(16385, '\x01')},
      {"server hello", Records(Handshake(HelloBody(ext), 2), 16384)},
      {"handshake over 16 KiB", Records(static_cast<char>(1) + U24(20000) + std::string(100, 'x'), 16384)},
      {"session id of 33", Records(Handshake(HelloBody(ext, 33)), 16384)},
      {"extensions length too long", Records(Handshake(HelloBody(ext) + "x"), 16384)},
      {"no cipher suites", Records(Handshake("\x03\x03" + std::string(32, 'r') + std::string("\x00", 1) + U16(0) +
                                             std::string("\x01\x00", 2)), 16384)},
      {"odd cipher suites", Records(Handshake("\x03\x03" + std::string(32, 'r') + std::string("\x00", 1) + U16(3) +
                                              "abc" + std::string("\x01\x00", 2)), 16384)},
      {"no compression methods", Records(Handshake("\x03\x03" + std::string(32, 'r') + std::string("\x00", 1) +
                                                   U16(2) + "ab" + std::string("\x00", 1)), 16384)},
      {"handshake cut short", Records(Handshake(HelloBody(ext)).substr(0, 30), 16384) + "\x16\x03\x01" + U16(0)},
      {"alert between fragments", Records(good.substr(0, 50), 16384) + "\x15\x03\x03" + U16(2) + "\x02\x28"},
  };
  for (const auto& [what, data] : cases) {
    EXPECT_EQ(Sniff(data).kind, Sniff::kOther) << what;
  }
  // One byte of a wrong record header is enough to tell.
  EXPECT_EQ(Sniff(std::string("\x16\x02", 2)).kind, Sniff::kOther);
  EXPECT_EQ(Sniff(std::string("\x16\x03", 2)).kind, Sniff::kNeedMore);
  EXPECT_EQ(Sniff(std::string("\x16\x03\x01\x00\x00", 5)).kind, Sniff::kOther);
  EXPECT_EQ(Sniff(std::string("\x16\x03\x01\x00\x05\x02", 6)).kind, Sniff::kOther);  // not a ClientHello
}

TEST(SniffHttpTest, ReadsMethodTargetAndHost) {
  SniffResult r = Sniff("GET /index.html?q=1 HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n");
  EXPECT_EQ(r.kind, Sniff::kHttp);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/index.html?q=1");
  EXPECT_EQ(r.name, "a.test");
}

TEST(SniffHttpTest, HostLosesItsPortAndBrackets) {
  struct Case {
    const char* host;
    std::optional<std::string> name;
  };
  for (const Case& c : std::vector<Case>{{"a.test:8080", "a.test"},
                                         {"A.Test", "A.Test"},
                                         {"a.test:", "a.test"},
                                         {"198.18.0.10:80", "198.18.0.10"},
                                         {"[2001:db8:1::10]:443", "2001:db8:1::10"},
                                         {"[2001:db8:1::10]", "2001:db8:1::10"},
                                         {"", std::nullopt}}) {
    SniffResult r = Sniff(std::string("GET / HTTP/1.1\r\nHost: ") + c.host + "\r\n\r\n");
    EXPECT_EQ(r.kind, Sniff::kHttp) << c.host;
    EXPECT_EQ(r.name, c.name) << c.host;
  }
}

TEST(SniffHttpTest, ProxyFormsAndHttp10) {
  SniffResult connect = Sniff("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n");
  EXPECT_EQ(connect.kind, Sniff::kHttp);
  EXPECT_EQ(connect.method, "CONNECT");
  EXPECT_EQ(connect.target, "a.test:443");
  EXPECT_EQ(connect.name, "a.test");
  SniffResult absolute = Sniff("GET http://b.test/x HTTP/1.1\r\nHost: b.test\r\n\r\n");
  EXPECT_EQ(absolute.kind, Sniff::kHttp);
  EXPECT_EQ(absolute.target, "http://b.test/x");
  SniffResult old = Sniff("GET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.kind, Sniff::kHttp);
  EXPECT_FALSE(old.name.has_value());
}

TEST(SniffHttpTest, ABodyOfAnySizeAfterTheHeadDoesNotMatter) {
  SniffResult big = Sniff("PUT /upload HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1073741824\r\n\r\nabc");
  EXPECT_EQ(big.kind, Sniff::kHttp);
  EXPECT_EQ(big.method, "PUT");
  EXPECT_EQ(big.name, "a.test");
  SniffResult chunked = Sniff("POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
  EXPECT_EQ(chunked.kind, Sniff::kHttp);
}

TEST(SniffHttpTest, EveryPrefixOfAHeadAsksForMore) {
  std::string head = "POST /v1/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\n";
  for (size_t n = 0; n < head.size(); ++n) {
    EXPECT_EQ(Sniff(head.substr(0, n)).kind, Sniff::kNeedMore) << head.substr(0, n);
  }
  EXPECT_EQ(Sniff(head).kind, Sniff::kHttp);
}

TEST(SniffHttpTest, OtherProtocolsAndBadHeadsAreOther) {
  std::vector<std::string> cases = {
      "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
      "SSH-2.0-OpenSSH_9.2p1\r\n",
      std::string("\x00\x01\x02\x03", 4),
      "\x80\x2e\x01\x03\x01",  // SSLv2-style hello
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
      "GET / HTTP/2.0\r\nHost: a.test\r\n\r\n",
      "get / http/1.1\r\n",
      "GET /\r\n",
      "GET  / HTTP/1.1\r\n",
      "GET / HTTP/1.1 \r\n\r\n",
      "G\tET / HTTP/1.1\r\n",
      std::string(33, 'A') + " / HTTP/1.1\r\n",
      std::string(40, 'A'),
      "GET / HTTP/1.1\r\nHost: a.test\r\nHost: other.test\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.test:x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.test:123456\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: 2001:db8::1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [2001:db8::1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [2001:db8::1]x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: []:80\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\xff.test\r\n\r\n",
      "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: x\r\n\r\n",
  };
  for (const auto& data : cases) {
    EXPECT_EQ(Sniff(data).kind, Sniff::kOther) << data;
  }
}

TEST(SniffHttpTest, AHeadLargerThanTheCapIsOther) {
  std::string start = "GET / HTTP/1.1\r\nHost: a.test\r\nX-Pad: ";
  std::string almost = start + std::string(kSniffCap - start.size() - 100, 'a');
  EXPECT_EQ(Sniff(almost).kind, Sniff::kNeedMore);
  EXPECT_EQ(Sniff(almost + "\r\n\r\n").kind, Sniff::kHttp);
  EXPECT_EQ(Sniff(start + std::string(kSniffCap, 'a')).kind, Sniff::kOther);
  EXPECT_EQ(Sniff(start + std::string(kSniffCap, 'a') + "\r\n\r\n").kind, Sniff::kOther);
  // A request line that never ends is also cut at the cap.
  EXPECT_EQ(Sniff("GET /" + std::string(kSniffCap, 'a')).kind, Sniff::kOther);
}

}  // namespace
}  // namespace bulkhead::net
