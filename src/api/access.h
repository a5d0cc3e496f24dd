// What a tenant's key may reach, route by route (service/access_keys.h). The host's admin key
// reaches every route. A tenant's key reaches its own sandboxes and their snapshots, keys of
// its tenant (tenant-admin), the image list and the daemon's health; every other route (host
// wide: images it would change, volumes, audit, metrics, tenants, imports) is the host admin's,
// and answers a tenant's key 403 until it is tenant-aware. Within that, read-only reads only,
// and user is all but keys.
#pragma once
#include "api/router.h"
#include "common/result.h"
#include "service/access_keys.h"

namespace bulkhead::api {

// {} if `caller` may call the matched `route`; else 403 "insufficient_scope" naming what the
// key lacks. (Whose objects it names is checked after: OwnedBy in handlers.)
Status AllowedByScope(const Caller& caller, RouteId route);

}  // namespace bulkhead::api
