#include "net/dns_message.h"

namespace bulkhead::net::dns {
namespace {

constexpr size_t kHeaderSize = 12;
constexpr size_t kMaxWireName = 255;  // RFC 1035 2.3.4, length bytes and the final zero included
constexpr size_t kMaxLabel = 63;
constexpr int kMaxPointerJumps = 64;
constexpr uint16_t kFlagQr = 0x8000, kFlagTc = 0x0200, kFlagRd = 0x0100, kFlagRa = 0x0080;

uint16_t Get16(std::string_view p, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(p[at]) << 8) | static_cast<uint8_t>(p[at + 1]));
}
uint32_t Get32(std::string_view p, size_t at) {
  return (static_cast<uint32_t>(Get16(p, at)) << 16) | Get16(p, at + 2);
}
void Put16(std::string& out, uint16_t v) {
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v & 0xff);
}

// One label byte as text: printable ASCII as is (lower-cased if asked), the rest, and the '.'
// and '\' that would make the dotted form ambiguous, as \DDD (RFC 1035 5.1 master-file style).
void AppendLabelByte(std::string& out, uint8_t c, bool lower) {
  if (c > 0x20 && c < 0x7f && c != '.' && c != '\\') {
    if (lower && c >= 'A' && c <= 'Z') c = static_cast<uint8_t>(c - 'A' + 'a');
    out += static_cast<char>(c);
    return;
  }
  out += '\\';
  out += static_cast<char>('0' + c / 100);
  out += static_cast<char>('0' + c / 10 % 10);
  out += static_cast<char>('0' + c % 10);
}

// Reads the name at `offset`, following compression pointers. Each pointer must point before
// the stretch of labels it ends (so pointers can never loop), there are at most 64 of them, and
// the name is at most 255 bytes uncompressed. `*end` = the offset just past the name where it
// was read (past the first pointer if there is one).
std::optional<std::string> ReadName(std::string_view packet, size_t offset, size_t* end, bool lower) {
  std::string name;
  size_t pos = offset, run_start = offset, wire_length = 0;
  int jumps = 0;
  bool jumped = false;
  while (true) {
    if (pos >= packet.size()) return std::nullopt;
    uint8_t length = static_cast<uint8_t>(packet[pos]);
    if (length == 0) {
      if (!jumped) *end = pos + 1;
      return name;
    }
    if ((length & 0xc0) == 0xc0) {
      if (pos + 1 >= packet.size()) return std::nullopt;
      size_t target = Get16(packet, pos) & 0x3fff;
      if (target >= run_start || ++jumps > kMaxPointerJumps) return std::nullopt;
      if (!jumped) *end = pos + 2;
      jumped = true;
      pos = run_start = target;
      continue;
    }
    if ((length & 0xc0) != 0) return std::nullopt;  // 0x40 and 0x80 label types are obsolete
    if (pos + 1 + length > packet.size()) return std::nullopt;
    wire_length += 1 + length;
    if (wire_length + 1 > kMaxWireName) return std::nullopt;
    if (!name.empty()) name += '.';
    for (size_t i = 0; i < length; ++i) AppendLabelByte(name, static_cast<uint8_t>(packet[pos + 1 + i]), lower);
    pos += 1 + length;
  }
}

// The wire form of a dotted name (the inverse of ReadName, \DDD and \X escapes included).
// A trailing dot is ignored; "" and "." are the root. False if a label is empty or too long or
// the name too long.
bool EncodeName(std::string_view name, std::string& out) {
  if (name == ".") name = {};
  std::string wire;
  std::string label;
  size_t i = 0;
  auto finish_label = [&]() {
    if (label.empty() || label.size() > kMaxLabel) return false;
    wire += static_cast<char>(label.size());
    wire += label;
    label.clear();
    return true;
  };
  while (i < name.size()) {
    char c = name[i];
    if (c == '.') {
      if (!finish_label()) return false;
      ++i;
      if (i == name.size()) break;  // the trailing dot
      continue;
    }
    if (c == '\\') {
      if (i + 1 >= name.size()) return false;
      char next = name[i + 1];
      if (next >= '0' && next <= '9') {
        if (i + 3 >= name.size()) return false;  // a \DDD cut short
        int value = 0;
        for (size_t k = 1; k <= 3; ++k) {
          char d = name[i + k];
          if (d < '0' || d > '9') return false;
          value = value * 10 + (d - '0');
        }
        if (value > 255) return false;
        label += static_cast<char>(value);
        i += 4;
      } else {
        label += next;
        i += 2;
      }
      continue;
    }
    label += c;
    ++i;
  }
  if (!label.empty() && !finish_label()) return false;
  wire += '\0';
  if (wire.size() > kMaxWireName) return false;
  out += wire;
  return true;
}

std::string Header(uint16_t id, uint16_t flags, uint16_t qdcount) {
  std::string out;
  Put16(out, id);
  Put16(out, flags);
  Put16(out, qdcount);
  Put16(out, 0);
  Put16(out, 0);
  Put16(out, 0);
  return out;
}

}  // namespace

std::optional<Question> ParseQuery(std::string_view packet) {
  if (packet.size() < kHeaderSize) return std::nullopt;
  Question q;
  q.id = Get16(packet, 0);
  q.flags = Get16(packet, 2);
  if ((q.flags & kFlagQr) != 0) return std::nullopt;
  if (((q.flags >> 11) & 0xf) != 0) return std::nullopt;  // only standard queries
  if (Get16(packet, 4) != 1) return std::nullopt;
  size_t end = 0;
  auto name = ReadName(packet, kHeaderSize, &end, /*lower=*/false);
  if (!name || end + 4 > packet.size()) return std::nullopt;
  q.name = std::move(*name);
  q.type = Get16(packet, end);
  q.qclass = Get16(packet, end + 2);
  return q;
}

std::string ErrorReply(const Question& query, uint8_t rcode) {
  uint16_t flags = kFlagQr | (query.flags & kFlagRd) | kFlagRa | (rcode & 0xf);
  std::string question;
  if (!EncodeName(query.name, question)) return Header(query.id, flags, 0);
  Put16(question, query.type);
  Put16(question, query.qclass);
  return Header(query.id, flags, 1) + question;
}

std::string BuildQuery(uint16_t id, std::string_view name, uint16_t type) {
  std::string question;
  if (!EncodeName(name, question)) return {};
  Put16(question, type);
  Put16(question, kClassIn);
  return Header(id, kFlagRd, 1) + question;
}

std::optional<Answer> ParseAnswer(std::string_view packet) {
  if (packet.size() < kHeaderSize) return std::nullopt;
  uint16_t flags = Get16(packet, 2);
  if ((flags & kFlagQr) == 0) return std::nullopt;
  Answer answer;
  answer.id = Get16(packet, 0);
  answer.rcode = static_cast<uint8_t>(flags & 0xf);
  answer.truncated = (flags & kFlagTc) != 0;
  uint16_t qdcount = Get16(packet, 4), ancount = Get16(packet, 6);

  // A truncated reply may end anywhere: keep what was read, the caller retries over TCP.
  auto malformed = [&]() -> std::optional<Answer> {
    if (answer.truncated) return answer;
    return std::nullopt;
  };
  size_t pos = kHeaderSize;
  for (uint16_t i = 0; i < qdcount; ++i) {
    size_t end = 0;
    if (!ReadName(packet, pos, &end, true) || end + 4 > packet.size()) return malformed();
    pos = end + 4;
  }
  for (uint16_t i = 0; i < ancount; ++i) {
    size_t end = 0;
    auto owner = ReadName(packet, pos, &end, /*lower=*/true);
    if (!owner || end + 10 > packet.size()) return malformed();
    uint16_t type = Get16(packet, end), rclass = Get16(packet, end + 2);
    uint32_t ttl = Get32(packet, end + 4);
    uint16_t rdlength = Get16(packet, end + 8);
    size_t rdata = end + 10;
    if (rdata + rdlength > packet.size()) return malformed();
    if (rclass == kClassIn && (type == kTypeA || type == kTypeAaaa)) {
      size_t want = type == kTypeA ? 4 : 16;
      if (rdlength != want) return malformed();
      AddressRecord record;
      record.name = std::move(*owner);
      record.address.v6 = type == kTypeAaaa;
      for (size_t k = 0; k < want; ++k) record.address.bytes[k] = static_cast<uint8_t>(packet[rdata + k]);
      if (record.address.v6) {
        // An AAAA of ::ffff:a.b.c.d is that IPv4 address, as everywhere else.
        sockaddr_in6 sa{};
        sa.sin6_family = AF_INET6;
        std::copy(record.address.bytes.begin(), record.address.bytes.end(), sa.sin6_addr.s6_addr);
        record.address = IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&sa));
      }
      record.ttl = (ttl & 0x80000000u) ? 0 : ttl;  // RFC 2181 8: a TTL with the top bit set is 0
      answer.addresses.push_back(std::move(record));
    }
    pos = rdata + rdlength;
  }
  return answer;
}

std::optional<uint16_t> MessageId(std::string_view packet) {
  if (packet.size() < 2) return std::nullopt;
  return Get16(packet, 0);
}

std::string WithId(std::string_view packet, uint16_t id) {
  std::string out(packet);
  if (out.size() < 2) return out;
  out[0] = static_cast<char>(id >> 8);
  out[1] = static_cast<char>(id & 0xff);
  return out;
}

}  // namespace bulkhead::net::dns
