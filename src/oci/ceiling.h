// What a container may ask of bulkhead-oci and is refused with the reason rather than given:
// host devices beyond the few every container has (a privileged pod gets all of the host's),
// and capabilities beyond Docker's default set (what containerd gives a pod that asks for
// none). Within that set, bulkhead's own ceiling (common/sandbox_caps.h: no NET_RAW, no MKNOD)
// applies without a word, as to every sandbox.
#pragma once
#include "common/result.h"
#include "oci/spec.h"

namespace bulkhead::oci {

// The char devices every container's /dev has (container_root.cc makes them, its device cgroup
// allows them, and a spec may list them again). Nothing else of the host's.
struct DefaultDevice {
  const char* path;
  unsigned major, minor;
};
inline constexpr DefaultDevice kDefaultDevices[] = {{"/dev/null", 1, 3},   {"/dev/zero", 1, 5},
                                                    {"/dev/full", 1, 7},   {"/dev/random", 1, 8},
                                                    {"/dev/urandom", 1, 9}, {"/dev/tty", 5, 0}};

Status CheckCeiling(const Spec& spec);

}  // namespace bulkhead::oci
