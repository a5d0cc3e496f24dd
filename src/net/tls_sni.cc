#include "net/tls_sni.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>

namespace bulkhead::net {
namespace {

namespace http = boost::beast::http;

constexpr uint8_t kRecordHandshake = 0x16;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kRecordHeader = 5;
constexpr size_t kMaxRecordPayload = 16384;  // RFC 8446 5.1: a plaintext record carries at most 2^14 bytes
constexpr size_t kHandshakeHeader = 4;
constexpr uint16_t kExtensionServerName = 0;
constexpr uint8_t kServerNameHostName = 0;
constexpr size_t kMaxMethodLength = 32;

SniffResult Other() { return SniffResult{Sniff::kOther, std::nullopt, {}, {}}; }
SniffResult NeedMore() { return SniffResult{Sniff::kNeedMore, std::nullopt, {}, {}}; }

// A destination name we pass on must be plain visible ASCII; anything else is not a host name
// and must not reach logs as raw bytes either.
bool IsVisibleAscii(std::string_view s) {
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

// Bounds-checked reading of a byte string, front to back.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  size_t remaining() const { return data_.size(); }
  bool U8(size_t& out) {
    if (data_.empty()) return false;
    out = static_cast<uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return true;
  }
  bool U16(size_t& out) {
    if (data_.size() < 2) return false;
    out = (static_cast<size_t>(static_cast<uint8_t>(data_[0])) << 8) | static_cast<uint8_t>(data_[1]);
    data_.remove_prefix(2);
    return true;
  }
  bool Bytes(size_t n, std::string_view& out) {
    if (data_.size() < n) return false;
    out = data_.substr(0, n);
    data_.remove_prefix(n);
    return true;
  }
  bool Skip(size_t n) {
    std::string_view unused;
    return Bytes(n, unused);
  }

 private:
  std::string_view data_;
};

// The server_name of a whole ClientHello body (after the 4-byte handshake header). A
// malformed hello, or an ambiguous server_name (two extensions or two host names), is kOther.
SniffResult ParseClientHelloBody(std::string_view body) {
  Reader r(body);
  size_t session_id = 0, cipher_suites = 0, compression = 0;
  if (!r.Skip(2 + 32)) return Other();  // legacy_version, random
  if (!r.U8(session_id) || session_id > 32 || !r.Skip(session_id)) return Other();
  if (!r.U16(cipher_suites) || cipher_suites < 2 || cipher_suites % 2 != 0 || !r.Skip(cipher_suites)) return Other();
  if (!r.U8(compression) || compression < 1 || !r.Skip(compression)) return Other();
  SniffResult result{Sniff::kTls, std::nullopt, {}, {}};
  if (r.remaining() == 0) return result;  // no extensions at all (old clients)

  size_t extensions_length = 0;
  if (!r.U16(extensions_length) || extensions_length != r.remaining()) return Other();
  bool seen_server_name = false;
  while (r.remaining() > 0) {
    size_t type = 0, length = 0;
    std::string_view data;
    if (!r.U16(type) || !r.U16(length) || !r.Bytes(length, data)) return Other();
    if (type != kExtensionServerName) continue;
    if (seen_server_name) return Other();
    seen_server_name = true;
    Reader names(data);
    size_t list_length = 0;
    if (!names.U16(list_length) || list_length != names.remaining() || list_length == 0) return Other();
    while (names.remaining() > 0) {
      size_t name_type = 0, name_length = 0;
      std::string_view name;
      if (!names.U8(name_type) || !names.U16(name_length) || !names.Bytes(name_length, name)) return Other();
      if (name_type != kServerNameHostName) continue;
      if (result.name || name.empty() || !IsVisibleAscii(name)) return Other();
      result.name = std::string(name);
    }
  }
  return result;
}

// TLS: gathers the handshake bytes of consecutive handshake records until the ClientHello is
// whole. Every byte seen so far must fit a ClientHello, or it is kOther straight away.
SniffResult SniffTls(std::string_view data) {
  std::string hello;
  size_t pos = 0;
  while (true) {
    if (hello.size() >= kHandshakeHeader) {
      if (static_cast<uint8_t>(hello[0]) != kHandshakeClientHello) return Other();
      size_t length = (static_cast<size_t>(static_cast<uint8_t>(hello[1])) << 16) |
                      (static_cast<size_t>(static_cast<uint8_t>(hello[2])) << 8) | static_cast<uint8_t>(hello[3]);
      if (kHandshakeHeader + length > kSniffCap) return Other();
      if (hello.size() >= kHandshakeHeader + length) {
        return ParseClientHelloBody(std::string_view(hello).substr(kHandshakeHeader, length));
      }
    } else if (!hello.empty() && static_cast<uint8_t>(hello[0]) != kHandshakeClientHello) {
      return Other();
    }
    if (pos == data.size()) return NeedMore();

    // A record header: type 22, version 3.x, a length of 1..2^14.
    std::string_view header = data.substr(pos, kRecordHeader);
    if (static_cast<uint8_t>(header[0]) != kRecordHandshake) return Other();
    if (header.size() >= 2 && header[1] != 0x03) return Other();
    if (header.size() < kRecordHeader) return NeedMore();
    size_t length = (static_cast<size_t>(static_cast<uint8_t>(header[3])) << 8) | static_cast<uint8_t>(header[4]);
    if (length == 0 || length > kMaxRecordPayload) return Other();  // RFC 8446 5.1: no empty handshake records
    pos += kRecordHeader;
    size_t available = std::min(length, data.size() - pos);
    hello.append(data.substr(pos, available));
    pos += available;
    if (hello.size() > kSniffCap) return Other();
  }
}

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Whether `data` can still become an HTTP/1.x request line ("METHOD SP target SP HTTP/1.").
// Beast only looks at a head once it has its blank line; this answers "not HTTP" early for
// protocols whose client speaks first in another language, and waits for those that do not.
bool CouldBeRequestLine(std::string_view data) {
  size_t i = 0;
  while (i < data.size() && IsTokenChar(data[i])) ++i;
  if (i > kMaxMethodLength) return false;
  if (i == data.size()) return true;
  if (i == 0 || data[i] != ' ') return false;
  size_t target = ++i;
  while (i < data.size() && data[i] > 0x20 && data[i] < 0x7f) ++i;
  if (i == data.size()) return true;
  if (i == target || data[i] != ' ') return false;
  std::string_view version = data.substr(i + 1);
  constexpr std::string_view kVersion = "HTTP/1.";
  size_t n = std::min(version.size(), kVersion.size());
  return version.substr(0, n) == kVersion.substr(0, n);
}

// The host part of a Host header: "a.test:8080" -> "a.test", "[2001:db8::1]:443" ->
// "2001:db8::1". nullopt if the value is malformed; "" if empty (no name).
std::optional<std::string> HostWithoutPort(std::string_view host) {
  std::string_view name = host, port;
  bool has_port = false;
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = host.substr(1, close - 1);
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      has_port = true;
    }
    if (name.empty()) return std::nullopt;
  } else if (size_t colon = host.find(':'); colon != std::string_view::npos) {
    if (host.find(':', colon + 1) != std::string_view::npos) return std::nullopt;  // bare IPv6
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
    has_port = true;
    if (name.empty()) return std::nullopt;
  }
  if (has_port && (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)) {
    return std::nullopt;
  }
  if (!IsVisibleAscii(name)) return std::nullopt;
  return std::string(name);
}

SniffResult SniffHttp(std::string_view data) {
  if (!CouldBeRequestLine(data)) return Other();
  http::request_parser<http::empty_body> parser;
  parser.header_limit(kSniffCap);
  parser.eager(false);
  parser.skip(true);  // only the head matters: a body (any length) is the upstream's business
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(data.data(), data.size()), ec);
  if (ec == http::error::need_more) return data.size() >= kSniffCap ? Other() : NeedMore();
  if (ec || !parser.is_header_done()) return Other();

  const auto& request = parser.get();
  if (request.version() != 10 && request.version() != 11) return Other();
  SniffResult result{Sniff::kHttp, std::nullopt, std::string(request.method_string()),
                     std::string(request.target())};
  if (request.count(http::field::host) > 1) return Other();  // RFC 9112 3.2: ambiguous, refused
  auto host = request.find(http::field::host);
  if (host != request.end()) {
    auto value = host->value();
    auto name = HostWithoutPort(std::string_view(value.data(), value.size()));
    if (!name) return Other();
    if (!name->empty()) result.name = std::move(*name);
  }
  return result;
}

}  // namespace

SniffResult SniffClientHello(std::string_view data) {
  if (data.empty()) return NeedMore();
  if (static_cast<uint8_t>(data[0]) == kRecordHandshake) return SniffTls(data);
  return SniffHttp(data);
}

}  // namespace bulkhead::net
