// Maps a request line onto a route of API.md. Pure: no I/O, so routing is tested alone.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/request_target.h"

namespace bulkhead::api {

enum class RouteId {
  kHealthz,
  kMetrics,
  kOpenApi,
  kCreateSandbox,
  kListSandboxes,
  kGetSandbox,
  kDeleteSandbox,
  kSetSandboxTimeout,
  kPauseSandbox,
  kResumeSandbox,
  kStopSandbox,
  kStartSandbox,
  kSetNetwork,
  kEgress,
  kExec,
  kListImages,
  kPutImage,
  kDeleteImage,
  kGetImage,
  kPullImage,
  kPushImage,
  kBuildImage,
  kPruneBuildCache,
  kCollectImageGarbage,
  kCreateVolume,
  kListVolumes,
  kGetVolume,
  kDeleteVolume,
  kCreateProcess,
  kListProcesses,
  kGetProcess,
  kProcessOutput,
  kProcessStdin,
  kProcessStdinClose,
  kProcessSignal,
  kProcessResize,
  kProcessAttach,
  kReadFile,
  kWriteFile,
  kDeleteFile,
  kStatFile,
  kListFiles,
  kMakeDirectory,
  kMoveFile,
  kDownloadArchive,
  kUploadArchive,
  kWatchFiles,
  kCreateSnapshot,
  kForkSandbox,
  kListSnapshots,
  kGetSnapshot,
  kDeleteSnapshot,
  kExportSnapshot,
  kImportSnapshot,
  kPortProxy,  // HTTP to a sandbox's 127.0.0.1:{port}
  kTcpForward,  // raw TCP to a sandbox's port (Upgrade: tcp), for port-forward
  kAudit,
  kCreateTenant,
  kListTenants,
  kGetTenant,
  kUpdateTenant,
  kDeleteTenant,
  kCreateKey,
  kListKeys,
  kRevokeKey,
  kNotImplemented,  // a route of API.md not served yet: 501 (after the sandbox id is checked)
};

struct RouteMatch {
  enum class Outcome { kMatched, kNotFound, kMethodNotAllowed };
  Outcome outcome = Outcome::kNotFound;
  RouteId id = RouteId::kNotImplemented;
  // The route's pattern ("/v1/sandboxes/{id}"): a bounded label for metrics and logs.
  // "unmatched" when no route has this path.
  std::string_view pattern = "unmatched";
  // Path parameters, percent-decoded, by their name in the pattern ("id", "name", ...).
  std::vector<std::pair<std::string_view, std::string>> params;
  // For kMethodNotAllowed: the methods the path accepts ("GET, DELETE"), for Allow.
  std::string allowed_methods;

  // The parameter `name`, or "" if the route has none by that name.
  const std::string& Param(std::string_view name) const;
  // GET /healthz is the only route served without the API key.
  bool NeedsAuth() const { return !(outcome == Outcome::kMatched && id == RouteId::kHealthz); }
};

// `path` is the request target without its query string.
RouteMatch MatchRoute(std::string_view method, std::string_view path);

// The patterns of every route, in table order (for tests and documentation checks).
std::vector<std::pair<std::string_view, std::string_view>> AllRoutes();  // {method, pattern}

// The request target for a sandbox's app from a port route's target
// ("/v1/sandboxes/ID/ports/PORT/a/b?q" -> "/a/b?q"), still encoded as the client sent it.
std::string PortProxyAppTarget(std::string_view target);

}  // namespace bulkhead::api
