// Memory snapshots of a microvm guest: its devices, CPUs and memory as of one instant, saved
// by QEMU and restored by a new QEMU (Tier::Checkpoint, LaunchSpec::memory_image). Only a guest
// restored from a template has what this needs (QEMU's pc machine with its monitor, the devices
// hotplugged at fixed slots: vmm.h HotplugDevices), and QEMU 8.2 or newer (the first to save a
// virtio-fs device: the back-end's state, virtiofsd's open files by path, travels in the stream).
//
// An image directory holds:
//   state   QEMU's migration stream without the guest's memory (x-ignore-shared)
//   memory  the guest's memory: a sparse copy of the memfd QEMU runs it in (launch.h kMemoryFd)
//
// QEMU saves no guest with a vhost-user-vsock device (it is unmigratable in every QEMU), so
// saving unplugs it first and plugs a new one in after: the guest lets the device go (ACPI
// hotplug, ~50 ms under TCG) and its connections end, the daemon's to init among them; init's
// listener outlives the device and serves the next one.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>

#include "common/result.h"
#include "runtime/microvm/vmm.h"

namespace bulkhead::runtime::microvm {

inline constexpr char kImageState[] = "/state";
inline constexpr char kImageMemory[] = "/memory";

// Saves the guest of QEMU `qemu` (its monitor at `qmp_socket`, its vsock device's vhost-user
// socket at `vsock_socket`) into `image_dir`, an empty directory of root's. The guest must be
// running: it takes part in the unplug. It is left stopped, with a new vsock device; Continue
// runs it.
Status SaveMemoryImage(const std::string& qmp_socket, pid_t qemu, const std::string& vsock_socket,
                       const std::string& image_dir);

// Unplugs the running guest's vsock device (if it has one), calls `unplugged` (which starts
// the device daemon again), and plugs a new device in.
Status ReplugVsock(const std::string& qmp_socket, pid_t qemu, const std::string& vsock_socket,
                   const std::function<Status()>& unplugged);

// What QEMU saw of the guest's use of its vsock device (for a log line where init does not
// answer): whether the guest's kernel set the device up (its memory BARs mapped), or not.
std::string VsockSeenByGuest(const std::string& qmp_socket, pid_t qemu);

// Runs the guest of QEMU `qemu` if its monitor says it is stopped (a save left it so), with a
// vsock device (a save cut short may have left it without). Where a killed daemon's save or
// replug left its mark, the save still going is cancelled and the old device, maybe still on
// its way out, is replaced. Its kernel then finds the new device: init is reachable again
// some milliseconds later.
Status Continue(const std::string& qmp_socket, pid_t qemu, const std::string& vsock_socket);

// Restores a saved guest into QEMU `qemu`, started with `vm` (incoming_fd: the image's state;
// memory_path: a copy of its memory): adds the devices the guest had (but vsock), loads the
// state, adds the vsock device and runs the guest.
Status LoadMemoryImage(const VmConfig& vm, pid_t qemu, std::chrono::steady_clock::time_point deadline);

}  // namespace bulkhead::runtime::microvm
