#include "common/time_format.h"
#include "net/egress_proxy.h"

namespace bulkhead::net {

nlohmann::json EgressRecordToJson(const EgressRecord& r) {
  using nlohmann::json;
  auto text_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  const timespec time{static_cast<time_t>(r.time_ms / 1000), static_cast<long>(r.time_ms % 1000) * 1000000};
  return {
      {"time", Rfc3339Millis(time)},
      {"protocol", r.protocol},
      {"name", text_or_null(r.name)},
      {"address", text_or_null(r.address)},
      {"port", r.port},
      {"query_type", text_or_null(r.query_type)},
      {"verdict", r.allowed ? "allowed" : "denied"},
      {"reason", text_or_null(r.reason)},
      {"bytes_out", r.bytes_out},
      {"bytes_in", r.bytes_in},
      {"duration_ms", r.duration_ms},
      {"open", r.open},
  };
}

}  // namespace bulkhead::net
