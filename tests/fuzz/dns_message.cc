// The DNS wire format (net/dns_message.h): a sandbox sends the resolver any bytes as a query,
// and an upstream (or whoever spoofs it) any bytes as an answer. The input is one packet.
//
// Checked: no parser reads out of bounds or loops; a parsed query's error reply is a
// well-formed answer to it that carries the same question; a query built for a parsed name
// parses back to that name; ids are read and replaced as they should be.
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "net/dns_message.h"

namespace {

using namespace bulkhead;
using namespace bulkhead::net;

// The question section of a message whose header says one question, read with ParseQuery
// by presenting it as a query.
std::optional<dns::Question> QuestionOf(std::string reply) {
  if (reply.size() < 12) return std::nullopt;
  reply[2] = 0;  // QR, opcode and the rest of the flags cleared
  reply[3] = 0;
  return dns::ParseQuery(reply);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view packet(reinterpret_cast<const char*>(data), size);

  if (std::optional<dns::Question> query = dns::ParseQuery(packet)) {
    for (uint8_t rcode : {dns::kRcodeNxDomain, dns::kRcodeServFail}) {
      const std::string reply = dns::ErrorReply(*query, rcode);
      std::optional<dns::Answer> answer = dns::ParseAnswer(reply);
      FUZZ_CHECK(answer.has_value(), "an error reply does not parse as an answer");
      FUZZ_CHECK(answer->id == query->id && answer->rcode == rcode && answer->addresses.empty(), query->name);
      // The question goes back as it came, so the client matches the reply to its query.
      std::optional<dns::Question> echoed = QuestionOf(reply);
      FUZZ_CHECK(echoed.has_value(), "the reply's question does not parse: " + query->name);
      FUZZ_CHECK(echoed->name == query->name && echoed->type == query->type && echoed->qclass == query->qclass,
                 query->name + " came back as " + echoed->name);
    }
    // The resolver asks upstream for the same name.
    const std::string upstream = dns::BuildQuery(0x4242, query->name, query->type);
    if (!upstream.empty()) {
      std::optional<dns::Question> asked = dns::ParseQuery(upstream);
      FUZZ_CHECK(asked.has_value(), "a built query does not parse: " + query->name);
      FUZZ_CHECK(asked->id == 0x4242 && asked->type == query->type && asked->qclass == dns::kClassIn, query->name);
      FUZZ_CHECK(asked->name == query->name, query->name + " was asked as " + asked->name);
    }
  }

  if (std::optional<dns::Answer> answer = dns::ParseAnswer(packet)) {
    for (const dns::AddressRecord& record : answer->addresses) {
      FUZZ_CHECK(record.ttl < 0x80000000u, std::to_string(record.ttl));
      for (char c : record.name) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), record.name);
    }
  }

  // The text as a name to look up.
  const std::string built = dns::BuildQuery(7, packet, dns::kTypeAaaa);
  if (!built.empty()) {
    std::optional<dns::Question> parsed = dns::ParseQuery(built);
    FUZZ_CHECK(parsed.has_value(), "a built query does not parse");
    // Its printed form names the same wire name.
    FUZZ_CHECK(dns::BuildQuery(7, parsed->name, dns::kTypeAaaa) == built, parsed->name);
  }

  if (std::optional<uint16_t> id = dns::MessageId(packet)) {
    const std::string renumbered = dns::WithId(packet, uint16_t(*id ^ 0xffff));
    FUZZ_CHECK(renumbered.size() == packet.size() && dns::MessageId(renumbered) == uint16_t(*id ^ 0xffff), "id");
    FUZZ_CHECK(dns::WithId(renumbered, *id) == packet, "id");
  }
  return 0;
}
