// The seccomp policy of every sandbox's workload, compiled once to BPF in the daemon: the native tier loads
// it in the sandbox child (no allocation after clone), the gvisor tier hands it to init.
#pragma once
#include <linux/filter.h>

#include <vector>

#include "common/result.h"

namespace bulkhead::runtime {

// A deny-list over Docker's default profile: everything the kernel exposes that a coding
// workload does not need and that has a history of privilege escalation. Other
// architectures (i386, x32) are killed outright.
Result<std::vector<sock_filter>> BuildSeccompFilter();

}  // namespace bulkhead::runtime
