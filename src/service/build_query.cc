// POST /v1/images/build's query parameters (image_build.h ParseBuildQuery).
#include <charconv>

#include "net/allow_rules.h"
#include "service/image_build.h"
#include "service/validate.h"

namespace bulkhead::api {
namespace {

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kBadRequest, message, "invalid_argument"); }

template <typename T>
std::optional<T> Number(const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

Result<std::string> ParseBuildQuery(const std::vector<std::pair<std::string, std::string>>& query, BuildRequest& out) {
  std::string dockerfile = "Dockerfile";
  std::string network;
  std::vector<std::string> allow;
  for (const auto& [key, value] : query) {
    if (key == "tag") {
      if (!IsValidImageName(value)) return Invalid("tag must match ^[a-z0-9][a-z0-9._-]{0,63}$");
      out.tag = value;
    } else if (key == "dockerfile") {
      if (value.empty() || value.size() > 4096) return Invalid("dockerfile must name a file in the build context");
      dockerfile = value;
    } else if (key == "target") {
      out.target = value;
    } else if (key == "runtime") {
      if (value != "native" && value != "gvisor" && value != "microvm")
        return Invalid("runtime must be one of native, gvisor, microvm");
      out.runtime = value;
    } else if (key == "pull") {
      if (value != "missing" && value != "always" && value != "never")
        return Invalid("pull must be one of missing, always, never");
      out.pull = value;
    } else if (key == "no_cache") {
      if (value != "true" && value != "false" && value != "1" && value != "0") return Invalid("no_cache must be true or false");
      out.no_cache = value == "true" || value == "1";
    } else if (key == "tenant") {
      continue;  // (whose build it is: the handler's, by the caller's key)
    } else if (key == "build_arg") {
      const size_t equals = value.find('=');
      if (equals == 0 || equals == std::string::npos) return Invalid("build_arg must be NAME=value, not " + value);
      if (out.build_args.size() >= 1000) return Invalid("at most 1000 build_arg");
      out.build_args[value.substr(0, equals)] = value.substr(equals + 1);
    } else if (key == "allow") {
      allow.push_back(value);
    } else if (key == "network") {
      network = value;
    } else if (key == "cpus") {
      auto cpus = Number<double>(value);
      if (!cpus || *cpus <= 0 || *cpus > 1024) return Invalid("cpus must be a number in (0, 1024]");
      out.cpus = *cpus;
    } else if (key == "timeout_s") {
      auto seconds = Number<int64_t>(value);
      if (!seconds || *seconds < 0 || *seconds > kMaxBuildTimeoutS)
        return Invalid("timeout_s must be a whole number of seconds from 0 (none) to " +
                       std::to_string(kMaxBuildTimeoutS));
      out.timeout_s = *seconds;
    } else if (key == "memory_mb" || key == "disk_mb") {
      auto mb = Number<int64_t>(value);
      if (!mb || *mb < 64 || *mb > (int64_t{1} << 24)) return Invalid(key + " must be a whole number of MiB, 64 or more");
      (key == "memory_mb" ? out.memory_mb : out.disk_mb) = *mb;
    } else {
      return Invalid("unknown parameter " + key);
    }
  }
  if (network.empty()) network = allow.empty() ? "none" : "allowlist";
  auto policy = net::ParsePolicy(network, allow);
  if (!policy.ok()) return Invalid("network: " + policy.error().message);
  out.network.mode = network;
  out.network.allow = allow;
  return dockerfile;
}

}  // namespace bulkhead::api
