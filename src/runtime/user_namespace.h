// User namespaces that map a sandbox's ids onto its host range (common/id_ranges.h): the one
// its processes run in, and the idmap through which stored files (images, volumes) show with
// the sandbox's ids.
#pragma once
#include <sys/types.h>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::runtime {

// Creates a user namespace, owned by host_id, that maps first_id..first_id+kIdCount-1 onto
// host ids starting at host_id: a sandbox's own (first_id 0), or the idmap that shows stored
// files (first_id kStoredIdBase) with the sandbox's ids.
Result<UniqueFd> CreateUserNamespace(uid_t host_id, uid_t first_id = 0);

}  // namespace bulkhead::runtime
