// What a container may ask of bulkhead-oci and is refused with the reason rather than given:
// host devices beyond the few every container has (a privileged pod gets all of the host's),
// and capabilities beyond Docker's default set (what containerd gives a pod that asks for
// none). Within that set, bulkhead's own ceiling (common/sandbox_caps.h: no NET_RAW, no MKNOD)
// applies without a word, as to every sandbox.
#pragma once
#include "common/result.h"
#include "oci/spec.h"

namespace bulkhead::oci {

Status CheckCeiling(const Spec& spec);

}  // namespace bulkhead::oci
