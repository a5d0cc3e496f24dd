// The egress proxy's first look at a connection (net/tls_sni.h): a sandbox's first bytes,
// read as a TLS ClientHello (its server_name) or an HTTP/1.x request head (its Host).
//
// Checked: no out-of-bounds read; a name handed on is visible ASCII without a port; and the
// verdict does not depend on how the bytes were split into reads: the proxy sniffs again
// after each read, so any prefix that already gives a verdict must give the same one as the
// whole input.
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "net/tls_sni.h"

namespace {

using namespace bulkhead;
using namespace bulkhead::net;

std::string Describe(const SniffResult& result) {
  return std::to_string(int(result.kind)) + " name=" + result.name.value_or("(none)") + " method=" + result.method +
         " target=" + result.target;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), std::min(size, kSniffCap));
  const SniffResult whole = SniffClientHello(bytes);
  if (whole.name) {
    FUZZ_CHECK(whole.kind == Sniff::kTls || whole.kind == Sniff::kHttp, Describe(whole));
    for (char c : *whole.name) FUZZ_CHECK(c > 0x20 && c < 0x7f, Describe(whole));
  }
  if (whole.kind != Sniff::kHttp) FUZZ_CHECK(whole.method.empty() && whole.target.empty(), Describe(whole));

  // The shortest prefix with a verdict decides for the proxy; check a few cut points.
  for (size_t cut : {size_t(1), size_t(5), size_t(9), bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    if (cut == 0 || cut >= bytes.size()) continue;
    const SniffResult part = SniffClientHello(bytes.substr(0, cut));
    if (part.kind == Sniff::kNeedMore) continue;
    FUZZ_CHECK(part.kind == whole.kind && part.name == whole.name,
               "after " + std::to_string(cut) + " bytes: " + Describe(part) + "; whole: " + Describe(whole));
  }
  return 0;
}
