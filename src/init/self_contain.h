// The containment steps init takes itself where its tier's runtime starts it as an ordinary
// container process (gvisor: runsc starts init with CAP_SYS_ADMIN, in gVisor's kernel), in
// order:
//   1. keep <dir> open as fd 3 (ctl::kListenFd): init dials the daemon's socket there
//      (ctl::kDaemonSocketName, through runsc's --host-uds=open) for as long as it runs;
//   2. cover <dir> with a tmpfs and mount the kernel's memory, pids, cpu and cpuacct cgroups
//      there, writable by init only; make the workload group with the sandbox's pids limit and
//      take its cgroup.procs as fd 4 (ctl::kWorkloadCgroupFd): every command joins it, so the
//      limit counts the sandbox's processes exactly; set the memory and CPU limits the host
//      enforces where programs read them (SetLimits changes them all); a guest kernel's
//      freezer shares the pids hierarchy (FreezeWorkload);
//   3. show those hierarchies read-only at /sys/fs/cgroup/<controller>, as the native tier
//      shows the sandbox's own groups, so that runtimes (JVM, Go, Node) size themselves;
//   4. hide <dir> under an empty read-only tmpfs: no process of the sandbox reaches the daemon's
//      socket, the writable cgroups, init's binary or the filter (init, not dumpable, reaches
//      the socket through its fd 3 alone);
//   5. mask /proc's kernel-facing files and make its tunables read-only (common/proc_masks.h),
//      and remove the devices gVisor's /dev has beyond the native tier's minimal set (fuse, net/tun
//      and the char/ links);
//   6. drop to the sandbox's capabilities (common/sandbox_caps.h), set no_new_privs and load
//      the tier's seccomp filter (read from <dir>/seccomp.bpf first: the native tier's policy),
//      so that what the sandbox's code may ask of gVisor's kernel is what it may ask of the
//      host's on native.
#pragma once
#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/ctl_messages.h"
#include "common/result.h"

namespace bulkhead::init {

// Runs the steps with the limits the daemon launched the sandbox with.
Status SelfContain(const std::string& dir, const ctl::LimitsMessage& limits);

// Steps 2 to 6, where init listens already (at ctl::kListenFd) and read the filter itself:
// the microvm tier's guest (guest_boot.h), whose init listens on vsock. With `whole_kernel`
// (a guest kernel of the sandbox's own) init holds only the pids limit: the sandbox's memory
// and CPUs are the VM's.
Status ContainListening(const std::string& dir, const ctl::LimitsMessage& limits, std::vector<sock_filter> filter,
                        bool whole_kernel);

// The tier's seccomp filter, compiled BPF (runtime/seccomp.h), from `path`.
Result<std::vector<sock_filter>> ReadFilter(const std::string& path);

// Sets the sandbox's limits (kLimits). Invalid when init did not contain itself: the host's
// cgroups are the daemon's to set.
Status SetLimits(const ctl::LimitsMessage& limits);

// Stops (or resumes) every process of the workload (kFreeze), where the sandbox's kernel is its
// own (microvm). Answers whether all had stopped within a second; invalid without a freezer.
Result<bool> FreezeWorkload(bool frozen);

}  // namespace bulkhead::init
