// The little of the DNS wire format (RFC 1035, 3596) that the sandbox resolver and the
// proxy's own lookups need: read a query's question, build queries and error replies, and read
// the A/AAAA records of an answer. Every parser bounds-checks and never loops on compression
// pointers (a hostile packet gets nullopt, not a crash).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/ip_address.h"

namespace bulkhead::net::dns {

constexpr uint16_t kTypeA = 1, kTypeCname = 5, kTypePtr = 12, kTypeMx = 15, kTypeTxt = 16, kTypeAaaa = 28,
                   kTypeSrv = 33, kTypeHttps = 65, kTypeAny = 255;
constexpr uint16_t kClassIn = 1;
constexpr uint8_t kRcodeNoError = 0, kRcodeFormErr = 1, kRcodeServFail = 2, kRcodeNxDomain = 3, kRcodeRefused = 5;

struct Question {
  uint16_t id = 0;
  uint16_t flags = 0;  // the header's second 16 bits as sent
  std::string name;    // as in the packet, dotted, no trailing dot, case kept ("" = the root);
                       // bytes other than visible ASCII, and '.' or '\' inside a label, as \DDD
  uint16_t type = 0;
  uint16_t qclass = 0;
};

// The single question of a query (QR=0, QDCOUNT=1, OPCODE=0); nullopt if the packet is not one.
std::optional<Question> ParseQuery(std::string_view packet);

// A reply to `query` carrying only its question and `rcode` (NXDOMAIN for names the policy
// does not allow, SERVFAIL when the upstream fails). Sets QR, RA, and copies RD and the id.
std::string ErrorReply(const Question& query, uint8_t rcode);

// A standard recursive query (RD=1) for one name and type; "" if `name` cannot be one (an
// empty label, a label over 63 bytes, over 255 bytes in all).
std::string BuildQuery(uint16_t id, std::string_view name, uint16_t type);

struct AddressRecord {
  std::string name;  // the owner name, lower case, no trailing dot
  IpAddress address;
  uint32_t ttl = 0;
};
struct Answer {
  uint16_t id = 0;
  uint8_t rcode = 0;
  bool truncated = false;  // TC: retry over TCP
  std::vector<AddressRecord> addresses;  // the A and AAAA records of the answer section
};
// A reply (QR=1); nullopt if malformed.
std::optional<Answer> ParseAnswer(std::string_view packet);

// The id of a DNS message (first two bytes), and the same message with another id: the
// resolver forwards a sandbox's query upstream under a fresh random id and restores it.
std::optional<uint16_t> MessageId(std::string_view packet);
std::string WithId(std::string_view packet, uint16_t id);

}  // namespace bulkhead::net::dns
