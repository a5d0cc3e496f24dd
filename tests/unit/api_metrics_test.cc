#include "api/metrics.h"

#include <gtest/gtest.h>

namespace bulkhead::api {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(HttpMetrics, CountsRequestsByMethodRouteAndCode) {
  HttpMetrics metrics;
  metrics.Record("GET", "/healthz", 200, 0.0005);
  metrics.Record("GET", "/healthz", 200, 0.002);
  metrics.Record("BREW", "unmatched", 404, 0.001);
  const std::string text = metrics.Render(core::ManagerStats{}, 3);
  EXPECT_TRUE(Has(text, "# TYPE bulkhead_http_requests_total counter\n"));
  EXPECT_TRUE(Has(text, "bulkhead_http_requests_total{method=\"GET\",route=\"/healthz\",code=\"200\"} 2\n"));
  // Arbitrary methods do not create new label values.
  EXPECT_TRUE(Has(text, "bulkhead_http_requests_total{method=\"other\",route=\"unmatched\",code=\"404\"} 1\n"));
  EXPECT_TRUE(Has(text, "bulkhead_http_connections_open 3\n"));
}

TEST(HttpMetrics, HistogramBucketsAreCumulative) {
  HttpMetrics metrics;
  metrics.Record("GET", "/v1/sandboxes", 200, 0.0005);  // <= 0.001
  metrics.Record("GET", "/v1/sandboxes", 200, 0.02);    // <= 0.025
  metrics.Record("GET", "/v1/sandboxes", 200, 1000);    // beyond every bucket
  const std::string text = metrics.Render(core::ManagerStats{}, 0);
  const std::string prefix = "bulkhead_http_request_duration_seconds";
  EXPECT_TRUE(Has(text, "# TYPE " + prefix + " histogram\n"));
  EXPECT_TRUE(Has(text, prefix + "_bucket{route=\"/v1/sandboxes\",le=\"0.001\"} 1\n"));
  EXPECT_TRUE(Has(text, prefix + "_bucket{route=\"/v1/sandboxes\",le=\"0.01\"} 1\n"));
  EXPECT_TRUE(Has(text, prefix + "_bucket{route=\"/v1/sandboxes\",le=\"0.025\"} 2\n"));
  EXPECT_TRUE(Has(text, prefix + "_bucket{route=\"/v1/sandboxes\",le=\"300\"} 2\n"));
  EXPECT_TRUE(Has(text, prefix + "_bucket{route=\"/v1/sandboxes\",le=\"+Inf\"} 3\n"));
  EXPECT_TRUE(Has(text, prefix + "_count{route=\"/v1/sandboxes\"} 3\n"));
  EXPECT_TRUE(Has(text, prefix + "_sum{route=\"/v1/sandboxes\"} 1000.0205\n"));
}

TEST(HttpMetrics, ExposesManagerStatsAndProcessMemory) {
  HttpMetrics metrics;
  core::ManagerStats stats;
  stats.sandboxes_running = 7;
  stats.sandboxes_created_total = 11;
  stats.sandboxes_deleted_total = 4;
  stats.sandbox_create_failures_total = 1;
  stats.execs_total = 99;
  stats.warm_pool_ready = 2;
  stats.warm_pool_hits_total = 8;
  stats.warm_pool_misses_total = 3;
  const std::string text = metrics.Render(stats, 0);
  EXPECT_TRUE(Has(text, "# TYPE bulkhead_sandboxes_running gauge\nbulkhead_sandboxes_running 7\n"));
  EXPECT_TRUE(Has(text, "# TYPE bulkhead_sandboxes_created_total counter\nbulkhead_sandboxes_created_total 11\n"));
  EXPECT_TRUE(Has(text, "bulkhead_sandboxes_deleted_total 4\n"));
  EXPECT_TRUE(Has(text, "bulkhead_sandbox_create_failures_total 1\n"));
  EXPECT_TRUE(Has(text, "bulkhead_execs_total 99\n"));
  EXPECT_TRUE(Has(text, "bulkhead_warm_pool_ready 2\n"));
  EXPECT_TRUE(Has(text, "bulkhead_warm_pool_hits_total 8\n"));
  EXPECT_TRUE(Has(text, "bulkhead_warm_pool_misses_total 3\n"));
  EXPECT_TRUE(Has(text, "# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_GT(ResidentMemoryBytes(), 1 << 20);
  // Every line is a comment or "name[{labels}] value".
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    const std::string line = text.substr(start, end - start);
    EXPECT_FALSE(line.empty());
    if (line[0] != '#') {
      EXPECT_NE(line.rfind(' '), std::string::npos) << line;
    }
    start = end + 1;
  }
}

}  // namespace
}  // namespace bulkhead::api
