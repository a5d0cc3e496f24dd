#include "api/router.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace bulkhead::api {
namespace {

struct RouteSpec {
  std::string_view method;  // "*" = any method
  std::string_view pattern;
  RouteId id;
};

// Every route of API.md. A "{name}" segment matches one non-empty segment; a trailing
// "{name...}" matches the rest of the path (possibly nothing).
constexpr std::array kRoutes = {
    RouteSpec{"GET", "/healthz", RouteId::kHealthz},
    RouteSpec{"GET", "/metrics", RouteId::kMetrics},
    RouteSpec{"GET", "/openapi.json", RouteId::kOpenApi},
    RouteSpec{"POST", "/v1/sandboxes", RouteId::kCreateSandbox},
    RouteSpec{"GET", "/v1/sandboxes", RouteId::kListSandboxes},
    RouteSpec{"GET", "/v1/sandboxes/{id}", RouteId::kGetSandbox},
    RouteSpec{"DELETE", "/v1/sandboxes/{id}", RouteId::kDeleteSandbox},
    RouteSpec{"POST", "/v1/sandboxes/{id}/timeout", RouteId::kSetSandboxTimeout},
    RouteSpec{"POST", "/v1/sandboxes/{id}/pause", RouteId::kPauseSandbox},
    RouteSpec{"POST", "/v1/sandboxes/{id}/resume", RouteId::kResumeSandbox},
    RouteSpec{"POST", "/v1/sandboxes/{id}/stop", RouteId::kStopSandbox},
    RouteSpec{"POST", "/v1/sandboxes/{id}/start", RouteId::kStartSandbox},
    RouteSpec{"POST", "/v1/sandboxes/{id}/exec", RouteId::kExec},
    RouteSpec{"GET", "/v1/images", RouteId::kListImages},
    RouteSpec{"PUT", "/v1/images/{name}", RouteId::kPutImage},
    RouteSpec{"DELETE", "/v1/images/{name}", RouteId::kDeleteImage},
    RouteSpec{"GET", "/v1/images/{name}", RouteId::kGetImage},
    RouteSpec{"POST", "/v1/images/pull", RouteId::kPullImage},
    RouteSpec{"POST", "/v1/images/push", RouteId::kPushImage},
    RouteSpec{"POST", "/v1/images/build", RouteId::kBuildImage},
    RouteSpec{"DELETE", "/v1/images/build/cache", RouteId::kPruneBuildCache},
    RouteSpec{"POST", "/v1/images/gc", RouteId::kCollectImageGarbage},
    RouteSpec{"PUT", "/v1/sandboxes/{id}/network", RouteId::kSetNetwork},
    RouteSpec{"GET", "/v1/sandboxes/{id}/egress", RouteId::kEgress},
    RouteSpec{"POST", "/v1/sandboxes/{id}/processes", RouteId::kCreateProcess},
    RouteSpec{"GET", "/v1/sandboxes/{id}/processes", RouteId::kListProcesses},
    RouteSpec{"GET", "/v1/sandboxes/{id}/processes/{pid}", RouteId::kGetProcess},
    RouteSpec{"GET", "/v1/sandboxes/{id}/processes/{pid}/output", RouteId::kProcessOutput},
    RouteSpec{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", RouteId::kProcessStdin},
    RouteSpec{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin/close", RouteId::kProcessStdinClose},
    RouteSpec{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", RouteId::kProcessSignal},
    RouteSpec{"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", RouteId::kProcessResize},
    RouteSpec{"GET", "/v1/sandboxes/{id}/processes/{pid}/attach", RouteId::kProcessAttach},
    RouteSpec{"GET", "/v1/sandboxes/{id}/files", RouteId::kReadFile},
    RouteSpec{"PUT", "/v1/sandboxes/{id}/files", RouteId::kWriteFile},
    RouteSpec{"DELETE", "/v1/sandboxes/{id}/files", RouteId::kDeleteFile},
    RouteSpec{"GET", "/v1/sandboxes/{id}/files/stat", RouteId::kStatFile},
    RouteSpec{"GET", "/v1/sandboxes/{id}/files/list", RouteId::kListFiles},
    RouteSpec{"POST", "/v1/sandboxes/{id}/files/mkdir", RouteId::kMakeDirectory},
    RouteSpec{"POST", "/v1/sandboxes/{id}/files/move", RouteId::kMoveFile},
    RouteSpec{"GET", "/v1/sandboxes/{id}/files/archive", RouteId::kDownloadArchive},
    RouteSpec{"PUT", "/v1/sandboxes/{id}/files/archive", RouteId::kUploadArchive},
    RouteSpec{"GET", "/v1/sandboxes/{id}/files/watch", RouteId::kWatchFiles},
    RouteSpec{"POST", "/v1/sandboxes/{id}/snapshots", RouteId::kCreateSnapshot},
    RouteSpec{"POST", "/v1/sandboxes/{id}/fork", RouteId::kForkSandbox},
    RouteSpec{"*", "/v1/sandboxes/{id}/ports/{port}/{path...}", RouteId::kPortProxy},
    RouteSpec{"GET", "/v1/sandboxes/{id}/tcp/{port}", RouteId::kTcpForward},
    RouteSpec{"GET", "/v1/snapshots", RouteId::kListSnapshots},
    RouteSpec{"GET", "/v1/snapshots/{snapshot_id}", RouteId::kGetSnapshot},
    RouteSpec{"DELETE", "/v1/snapshots/{snapshot_id}", RouteId::kDeleteSnapshot},
    RouteSpec{"GET", "/v1/snapshots/{snapshot_id}/export", RouteId::kExportSnapshot},
    RouteSpec{"POST", "/v1/snapshots/import", RouteId::kImportSnapshot},
    RouteSpec{"GET", "/v1/audit", RouteId::kAudit},
    RouteSpec{"GET", "/v1/volumes", RouteId::kListVolumes},
    RouteSpec{"POST", "/v1/volumes", RouteId::kCreateVolume},
    RouteSpec{"GET", "/v1/volumes/{name}", RouteId::kGetVolume},
    RouteSpec{"DELETE", "/v1/volumes/{name}", RouteId::kDeleteVolume},
    RouteSpec{"POST", "/v1/tenants", RouteId::kCreateTenant},
    RouteSpec{"GET", "/v1/tenants", RouteId::kListTenants},
    RouteSpec{"GET", "/v1/tenants/{tenant}", RouteId::kGetTenant},
    RouteSpec{"PATCH", "/v1/tenants/{tenant}", RouteId::kUpdateTenant},
    RouteSpec{"DELETE", "/v1/tenants/{tenant}", RouteId::kDeleteTenant},
    RouteSpec{"POST", "/v1/keys", RouteId::kCreateKey},
    RouteSpec{"GET", "/v1/keys", RouteId::kListKeys},
    RouteSpec{"DELETE", "/v1/keys/{key_id}", RouteId::kRevokeKey},
};

std::vector<std::string_view> SplitSegments(std::string_view path) {
  std::vector<std::string_view> segments;
  path.remove_prefix(1);  // the leading '/'
  while (true) {
    const size_t slash = path.find('/');
    segments.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return segments;
}

// Matches decoded path segments against a pattern; fills `params` on success.
bool MatchPattern(std::string_view pattern, const std::vector<std::string>& segments,
                  std::vector<std::pair<std::string_view, std::string>>& params) {
  const std::vector<std::string_view> parts = SplitSegments(pattern);
  params.clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    const bool is_param = part.size() > 2 && part.front() == '{' && part.back() == '}';
    if (is_param && part.ends_with("...}")) {
      std::string rest;
      for (size_t j = i; j < segments.size(); ++j) {
        if (j > i) rest += '/';
        rest += segments[j];
      }
      params.emplace_back(part.substr(1, part.size() - 5), std::move(rest));
      return true;
    }
    if (i >= segments.size()) return false;
    if (is_param) {
      if (segments[i].empty()) return false;
      params.emplace_back(part.substr(1, part.size() - 2), segments[i]);
    } else if (part != segments[i]) {
      return false;
    }
  }
  return parts.size() == segments.size();
}

// How many segments of a pattern are fixed text rather than {parameters}.
size_t LiteralParts(std::string_view pattern) {
  size_t literal = 0;
  for (std::string_view part : SplitSegments(pattern)) literal += part.empty() || part.front() != '{';
  return literal;
}

}  // namespace

const std::string& RouteMatch::Param(std::string_view name) const {
  static const std::string kEmpty;
  for (const auto& [key, value] : params) {
    if (key == name) return value;
  }
  return kEmpty;
}

RouteMatch MatchRoute(std::string_view method, std::string_view path) {
  RouteMatch result;
  if (path.empty() || path[0] != '/') return result;
  std::vector<std::string> segments;
  for (std::string_view raw : SplitSegments(path)) {
    auto decoded = PercentDecode(raw, /*plus_is_space=*/false);
    if (!decoded) return result;
    segments.push_back(std::move(*decoded));
  }
  // A concrete path wins over a templated one that also matches it (OpenAPI's rule):
  // /v1/snapshots/import is POST only, not also GET /v1/snapshots/{snapshot_id} of "import".
  std::vector<std::pair<std::string_view, std::string>> params;
  size_t most_literal = 0;
  for (const RouteSpec& route : kRoutes) {
    if (MatchPattern(route.pattern, segments, params)) most_literal = std::max(most_literal, LiteralParts(route.pattern));
  }
  for (const RouteSpec& route : kRoutes) {
    if (LiteralParts(route.pattern) != most_literal || !MatchPattern(route.pattern, segments, params)) continue;
    if (route.method == "*" || route.method == method) {
      result.outcome = RouteMatch::Outcome::kMatched;
      result.id = route.id;
      result.pattern = route.pattern;
      result.params = std::move(params);
      result.allowed_methods.clear();
      return result;
    }
    // The path exists with another method; keep looking in case a later route takes this one.
    result.outcome = RouteMatch::Outcome::kMethodNotAllowed;
    result.pattern = route.pattern;
    if (!result.allowed_methods.empty()) result.allowed_methods += ", ";
    result.allowed_methods += route.method;
  }
  return result;
}

std::vector<std::pair<std::string_view, std::string_view>> AllRoutes() {
  std::vector<std::pair<std::string_view, std::string_view>> routes;
  for (const RouteSpec& route : kRoutes) routes.emplace_back(route.method, route.pattern);
  return routes;
}

std::string PortProxyAppTarget(std::string_view target) {
  // Past "/v1/sandboxes/ID/ports/PORT": the sixth '/' starts the app's path.
  size_t at = 0;
  for (int slashes = 0; slashes < 6; ++slashes) {
    at = target.find_first_of(slashes < 5 ? "/" : "/?", at + (slashes == 0 ? 0 : 1));
    if (at == std::string_view::npos) return "/";
  }
  if (target[at] == '?') return "/" + std::string(target.substr(at));
  return std::string(target.substr(at));
}

}  // namespace bulkhead::api
