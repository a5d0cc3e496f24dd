// Init as PID 1 of a microVM guest (the microvm tier): the guest kernel runs it from the
// initramfs the tier built, as `/init --guest ARG` (ctl::GuestBootMessage). It makes the
// sandbox's world itself, as the native tier's launcher does from outside, in order:
//   1. /proc, /sys and /dev (devtmpfs) for itself; the kernel modules the initramfs lists in
//      /modules/order loaded in that order (the guest kernel's virtio-fs and vsock drivers);
//   2. the sandbox's root: the virtio-fs share tagged "root" (the sandbox's files as the host
//      keeps them: the image under its writable layer) at /newroot, each volume's share at its
//      target (made where missing; read-only ones read-only);
//   3. below it, /proc, a /dev of the native tier's devices (null, zero, full, random,
//      urandom, tty, pts, shm), /sys read-only, the hostname "sandbox", loopback up;
//   4. the root switched to it (the initramfs stays behind, unreachable);
//   5. a listener on the vsock port (ctl::kListenFd), which the daemon reaches through the
//      VMM's vsock device, and then SelfContain's steps 2 to 6 on /dev/.bulkhead (cgroups,
//      hidden control directory, /proc masks, the sandbox's capabilities, seccomp);
//   6. a connection to the host's vsock port ctl::kGuestReadyPort: the sign that init serves.
// Any failure stops init, and with it the guest (its kernel panics, the VMM exits), which the
// tier reports with the guest's console output.
#pragma once
#include <string>

#include "common/result.h"

namespace bulkhead::init {

Status GuestBoot(const std::string& arg);

// `init --guest-template`: step 1, then the boot message read from the second serial port
// (ctl::kGuestTemplatePort) once ctl::kGuestTemplateSign is written there. The tier saves the
// guest while it waits and restores a copy per sandbox, the sandbox's devices added (hotplugged)
// before it runs; the copy takes the host's clock and fresh entropy from the message, waits for
// those devices to appear, and goes on from step 2.
Status GuestTemplate();

// A guest's init (either of the above): sets the guest's wall clock to `realtime_ns` (if > 0)
// and mixes `entropy` (64 hex digits, if given) into its random generator, through the clock
// keeper BootFrom forked before init dropped its privileges. kInvalid in other inits.
Status SetGuestClock(int64_t realtime_ns, const std::string& entropy);

// `init --guest-probe`: prints ctl::kGuestProbeSign on the console and powers the guest off.
// The tier boots it to learn whether KVM runs a guest on this host (runtime/microvm/accelerator.h).
[[noreturn]] void GuestProbe();

}  // namespace bulkhead::init
