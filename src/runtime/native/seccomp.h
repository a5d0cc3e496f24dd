// The seccomp policy of native sandboxes, compiled once to BPF in the daemon so the
// sandbox child only has to load it (no allocation after clone).
#pragma once
#include <linux/filter.h>

#include <vector>

#include "common/result.h"

namespace bulkhead::runtime::native {

// A deny-list over Docker's default profile: everything the kernel exposes that a coding
// workload does not need and that has a history of privilege escalation. Other
// architectures (i386, x32) are killed outright.
Result<std::vector<sock_filter>> BuildSeccompFilter();

}  // namespace bulkhead::runtime::native
