// Request counters and latency histograms for GET /metrics (Prometheus text format 0.0.4).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include "core/sandbox_manager.h"

namespace bulkhead::api {

class HttpMetrics {
 public:
  // Upper bounds of the latency buckets, in seconds (exec and image import run long).
  static constexpr std::array<double, 14> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1,     2.5,  10,   60,  300};

  // `route` is a route pattern or "unmatched", so label sets stay bounded.
  void Record(std::string_view method, std::string_view route, int status, double seconds);

  // The whole exposition: HTTP metrics, the manager's counters and process memory.
  std::string Render(const core::ManagerStats& stats, int64_t open_connections) const;

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};  // not cumulative; summed when rendered
    uint64_t count = 0;
    double sum = 0;
  };

  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;  // method, route, code
  std::map<std::string, Histogram> durations_;                              // by route
};

// Each tenant's quotas and what it holds of them: bulkhead_tenant_usage and
// bulkhead_tenant_quota, labelled by tenant and resource (a quota that is not set is absent).
struct TenantMetrics {
  std::string tenant;
  core::TenantQuota quota;
  core::Amounts usage;
};
void AppendTenantMetrics(std::string& out, const std::vector<TenantMetrics>& tenants);

// A method name safe to use as a label: the usual ones as given, anything else "other".
std::string_view MethodLabel(std::string_view method);

// Resident set size of this process, from /proc/self/statm; 0 if unreadable.
int64_t ResidentMemoryBytes();

}  // namespace bulkhead::api
