#include "api/access.h"

#include <string>

namespace bulkhead::api {
namespace {

enum class Reach { kEveryone, kTenantRead, kTenantWrite, kTenantKeys, kHostAdmin };

Reach ReachOf(RouteId route) {
  switch (route) {
    case RouteId::kHealthz:
    case RouteId::kOpenApi: return Reach::kEveryone;
    case RouteId::kListImages:
    case RouteId::kGetImage:
    case RouteId::kListSandboxes:
    case RouteId::kGetSandbox:
    case RouteId::kEgress:
    case RouteId::kListProcesses:
    case RouteId::kGetProcess:
    case RouteId::kProcessOutput:
    case RouteId::kReadFile:
    case RouteId::kStatFile:
    case RouteId::kListFiles:
    case RouteId::kDownloadArchive:
    case RouteId::kWatchFiles:
    case RouteId::kListSnapshots:
    case RouteId::kGetSnapshot:
    case RouteId::kExportSnapshot:
    case RouteId::kListVolumes:
    case RouteId::kGetVolume:
    case RouteId::kGetTenant: return Reach::kTenantRead;  // (its own: access_handlers.cc)
    case RouteId::kCreateSandbox:
    case RouteId::kDeleteSandbox:
    case RouteId::kSetSandboxTimeout:
    case RouteId::kPauseSandbox:
    case RouteId::kResumeSandbox:
    case RouteId::kStopSandbox:
    case RouteId::kStartSandbox:
    case RouteId::kSetNetwork:
    case RouteId::kExec:
    case RouteId::kCreateProcess:
    case RouteId::kProcessStdin:
    case RouteId::kProcessStdinClose:
    case RouteId::kProcessSignal:
    case RouteId::kProcessResize:
    case RouteId::kProcessAttach:  // (its stdin)
    case RouteId::kWriteFile:
    case RouteId::kDeleteFile:
    case RouteId::kMakeDirectory:
    case RouteId::kMoveFile:
    case RouteId::kUploadArchive:
    case RouteId::kCreateSnapshot:
    case RouteId::kForkSandbox:
    case RouteId::kDeleteSnapshot:
    case RouteId::kPutImage:  // (its tenant's own images: ApiHandlers)
    case RouteId::kDeleteImage:
    case RouteId::kPullImage:
    case RouteId::kPushImage:
    case RouteId::kBuildImage:
    case RouteId::kCreateVolume:
    case RouteId::kDeleteVolume:
    case RouteId::kTcpForward:
    case RouteId::kPortProxy:  // (what the sandbox's server does with a request, a GET too, is its own)
    case RouteId::kNotImplemented: return Reach::kTenantWrite;
    case RouteId::kCreateKey:
    case RouteId::kListKeys:
    case RouteId::kRevokeKey: return Reach::kTenantKeys;
    default: return Reach::kHostAdmin;
  }
}

Error Refused(const Caller& caller, const std::string& what) {
  return MakeError(ErrorCode::kForbidden,
                   "this key (" + std::string(ScopeName(caller.scope)) + " of tenant " + caller.tenant + ") " + what,
                   "insufficient_scope");
}

}  // namespace

Status AllowedByScope(const Caller& caller, RouteId route) {
  if (caller.HostAdmin()) return {};
  switch (ReachOf(route)) {
    case Reach::kEveryone:
    case Reach::kTenantRead: return {};
    case Reach::kTenantWrite:
      if (caller.scope == Scope::kReadOnly) return Refused(caller, "may only read");
      return {};
    case Reach::kTenantKeys:
      if (caller.scope == Scope::kTenantAdmin) return {};
      return Refused(caller, "may not manage keys (tenant-admin may)");
    case Reach::kHostAdmin: return Refused(caller, "may not call this host-wide route (the host's admin key may)");
  }
  return Refused(caller, "may not call this route");
}

}  // namespace bulkhead::api
