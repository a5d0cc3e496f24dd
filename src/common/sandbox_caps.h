// The capabilities a sandbox's root keeps, in every tier: Docker's default set minus NET_RAW
// and MKNOD, which nothing here may use. The native tier sets them before it execs init; where
// a tier's runtime starts init with more (gvisor: init mounts its own cgroup first), init drops
// to them itself before it serves.
#pragma once
#include <linux/capability.h>

#include <cstdint>

namespace bulkhead {

inline constexpr int kSandboxCaps[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_SETGID,
                                       CAP_SETUID, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_KILL,
                                       CAP_SYS_CHROOT, CAP_SETFCAP, CAP_AUDIT_WRITE};

// The set as a bit mask (bit n = capability n).
constexpr uint64_t SandboxCapMask() {
  uint64_t mask = 0;
  for (int c : kSandboxCaps) mask |= uint64_t{1} << c;
  return mask;
}

}  // namespace bulkhead
