// The host uid/gid ranges bulkhead uses, far above any real account.
//
// Each sandbox maps its ids 0..kIdCount-1 onto a range of its own from kFirstHostId on
// (runtime/uid_ranges.h hands them out). The files bulkhead keeps for any sandbox to use
// (images, volumes, imported snapshots) are stored owned by kStoredIdBase + the id they have
// inside a sandbox, and each sandbox sees them through a mount idmapped from that range onto
// its own: nothing stored is owned by a host account (an image's setuid-root files included),
// and a file capability stored there names kStoredIdBase as its root, which the host ignores.
// No process ever runs with an id of the stored range.
#pragma once
#include <sys/types.h>

namespace bulkhead {

constexpr uid_t kIdCount = 65536;
constexpr uid_t kNobodyId = 65534;  // the overflow id inside a sandbox
constexpr uid_t kFirstHostId = 0x10000000;
constexpr uid_t kStoredIdBase = kFirstHostId - kIdCount;

}  // namespace bulkhead
