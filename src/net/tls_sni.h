// Reading the destination name a client announces in its first bytes, before any byte goes
// upstream: the server_name of a TLS ClientHello, or the Host of an HTTP/1.x request head.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead::net {

enum class Sniff {
  kNeedMore,  // a prefix of something we could read: wait for more bytes (up to the cap)
  kTls,       // a complete ClientHello; `name` set if it carries server_name (host_name type)
  kHttp,      // a complete request head; `name` = its Host (port and [] stripped), if any
  // A malformed or ambiguous name (two server_names, two Host headers, bytes other than
  // visible ASCII, a Host with a bad port) is kOther: the destination is unknown.
  kOther,     // neither: some other protocol
};
struct SniffResult {
  Sniff kind = Sniff::kNeedMore;
  std::optional<std::string> name;  // as sent (not normalized)
  std::string method;  // kHttp: "GET", "CONNECT", ... ; target in `target`
  std::string target;  // kHttp: the request target as sent ("/x", "http://h/x", "h:443")
};

// Looks at the first bytes a client sent. Only reads: the caller forwards `data` unchanged.
// A ClientHello split over several TLS records is handled; one larger than 16 KiB, or a
// request head larger than 16 KiB, is kOther.
SniffResult SniffClientHello(std::string_view data);
constexpr size_t kSniffCap = 16 * 1024;

}  // namespace bulkhead::net
