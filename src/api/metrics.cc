#include "api/metrics.h"

#include <unistd.h>

#include <fstream>

#include <fmt/format.h>

namespace bulkhead::api {
namespace {

// Label values come from fixed tables, but escape anyway as the format requires.
std::string EscapeLabel(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void AppendHeader(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void AppendSimple(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                  int64_t value) {
  AppendHeader(out, name, type, help);
  fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

}  // namespace

std::string_view MethodLabel(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    if (method == known) return known;
  }
  return "other";
}

void HttpMetrics::Record(std::string_view method, std::string_view route, int status, double seconds) {
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(MethodLabel(method)), std::string(route), status}];
  Histogram& histogram = durations_[std::string(route)];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      ++histogram.buckets[i];
      break;
    }
  }
  ++histogram.count;
  histogram.sum += seconds;
}

std::string HttpMetrics::Render(const core::ManagerStats& stats, int64_t open_connections) const {
  std::string out;
  auto it = std::back_inserter(out);
  {
    std::lock_guard lock(mutex_);
    AppendHeader(out, "bulkhead_http_requests_total", "counter", "HTTP requests answered.");
    for (const auto& [key, count] : requests_) {
      const auto& [method, route, code] = key;
      fmt::format_to(it, "bulkhead_http_requests_total{{method=\"{}\",route=\"{}\",code=\"{}\"}} {}\n",
                     EscapeLabel(method), EscapeLabel(route), code, count);
    }
    AppendHeader(out, "bulkhead_http_request_duration_seconds", "histogram",
                 "Time from a request's headers to the end of its response.");
    for (const auto& [route, histogram] : durations_) {
      const std::string label = EscapeLabel(route);
      uint64_t cumulative = 0;
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        cumulative += histogram.buckets[i];
        fmt::format_to(it, "bulkhead_http_request_duration_seconds_bucket{{route=\"{}\",le=\"{}\"}} {}\n",
                       label, kBuckets[i], cumulative);
      }
      fmt::format_to(it, "bulkhead_http_request_duration_seconds_bucket{{route=\"{}\",le=\"+Inf\"}} {}\n",
                     label, histogram.count);
      fmt::format_to(it, "bulkhead_http_request_duration_seconds_sum{{route=\"{}\"}} {}\n", label,
                     histogram.sum);
      fmt::format_to(it, "bulkhead_http_request_duration_seconds_count{{route=\"{}\"}} {}\n", label,
                     histogram.count);
    }
  }
  AppendSimple(out, "bulkhead_http_connections_open", "gauge", "Open HTTP connections.", open_connections);
  AppendSimple(out, "bulkhead_sandboxes_running", "gauge", "Sandboxes currently running.",
               stats.sandboxes_running);
  AppendSimple(out, "bulkhead_sandboxes_created_total", "counter", "Sandboxes created.",
               stats.sandboxes_created_total);
  AppendSimple(out, "bulkhead_sandboxes_deleted_total", "counter", "Sandboxes deleted.",
               stats.sandboxes_deleted_total);
  AppendSimple(out, "bulkhead_sandbox_create_failures_total", "counter", "Sandbox creations that failed.",
               stats.sandbox_create_failures_total);
  AppendSimple(out, "bulkhead_execs_total", "counter", "Commands started with exec.", stats.execs_total);
  AppendSimple(out, "bulkhead_warm_pool_ready", "gauge", "Prepared sandboxes waiting in the warm pool.",
               stats.warm_pool_ready);
  AppendSimple(out, "bulkhead_warm_pool_hits_total", "counter", "Creations served from the warm pool.",
               stats.warm_pool_hits_total);
  AppendSimple(out, "bulkhead_warm_pool_misses_total", "counter", "Creations the warm pool could not serve.",
               stats.warm_pool_misses_total);
  AppendSimple(out, "bulkhead_snapshots", "gauge", "Snapshots kept.", stats.snapshots);
  AppendHeader(out, "bulkhead_storage_driver_info", "gauge",
               "The storage driver of layers and snapshots (overlay or btrfs), as a label.");
  fmt::format_to(it, "bulkhead_storage_driver_info{{driver=\"{}\"}} 1\n", EscapeLabel(stats.storage_driver));
  AppendSimple(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
               ResidentMemoryBytes());
  return out;
}

int64_t ResidentMemoryBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * sysconf(_SC_PAGE_SIZE);
}

void AppendTenantMetrics(std::string& out, const std::vector<TenantMetrics>& tenants) {
  auto it = std::back_inserter(out);
  AppendHeader(out, "bulkhead_tenant_usage", "gauge",
               "What a tenant holds of a resource its quotas name (creates_per_minute: in the last minute).");
  for (const TenantMetrics& tenant : tenants)
    for (core::Resource r : core::kAllResources)
      fmt::format_to(it, "bulkhead_tenant_usage{{tenant=\"{}\",resource=\"{}\"}} {}\n", EscapeLabel(tenant.tenant),
                     core::NameOf(r).key, tenant.usage[r]);
  AppendHeader(out, "bulkhead_tenant_quota", "gauge", "A tenant's quota of a resource (absent: none set).");
  for (const TenantMetrics& tenant : tenants)
    for (core::Resource r : core::kAllResources)
      if (tenant.quota[r])
        fmt::format_to(it, "bulkhead_tenant_quota{{tenant=\"{}\",resource=\"{}\"}} {}\n", EscapeLabel(tenant.tenant),
                       core::NameOf(r).key, *tenant.quota[r]);
}

}  // namespace bulkhead::api
