// The virtual machine monitor the microvm tier drives, and what it boots: QEMU's `microvm`
// machine (Debian's qemu-system-x86), the guest kernel and the vhost-user device daemons that
// scripts/install-microvm.sh installs. Firecracker and Cloud Hypervisor are detected (for
// /healthz) but not driven: no backend of theirs has been run here.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::runtime::microvm {

// Where scripts/install-microvm.sh installs the guest kernel and the device daemons.
inline constexpr char kInstallDir[] = "/usr/local/lib/bulkhead/microvm";

struct Installed {
  std::string qemu, qemu_version;      // the binary and the first line of its --version
  int qemu_release = 0;                // its major * 100 + minor (10.0.2 -> 1000)
  std::string kernel, kernel_version;  // the PVH vmlinux and "<package> <version>"
  std::vector<std::string> modules;    // the guest's .ko files, in load order
  std::string virtiofsd, virtiofsd_version;
  std::string vsock_device, vsock_device_version;  // vhost-device-vsock
  int64_t tsc_khz = 0;                  // HostTscKhz, read once
  std::vector<std::string> other_vmms;  // OtherVmmsFound, looked for once
};

// What is installed under `dir`, each piece checked; kUnavailable naming what is missing and
// the script that installs it.
Result<Installed> FindInstalled(const std::string& dir = kInstallDir);
// "QEMU emulator version 10.0.2 (Debian ...)" -> 1000; 0 when it says no version.
int QemuRelease(const std::string& version_line);

// One guest's QEMU command line.
struct VmConfig {
  std::string qemu, kernel, initramfs;
  std::string command_line;  // the kernel's
  bool kvm = false;          // else TCG
  int vcpus = 1;
  int64_t memory_mb = 256;
  std::string console_log;   // the serial console's output (a file)
  std::vector<std::string> virtiofs_sockets;  // vhost-user sockets; tag "root", then "v0", "v1", ...
  std::string vsock_socket;  // vhost-device-vsock's vhost-user socket; none if empty
  int tap_fd = -1;           // the NIC's tap (common/guest_link.h), open in QEMU; -1: no NIC
  uid_t run_uid = 0;         // QEMU drops to this uid (and gid) once it set up; 0 = stays
  int qemu_release = 0;      // Installed::qemu_release: how to ask for run_uid (-runas is gone in 10.0)
  std::string name;          // shown in ps
  // A template guest or a copy restored from one (template.h): QEMU's `pc` machine (PCI with
  // ACPI hotplug: microvm's virtio-mmio takes no device once running, and QEMU 7.2 cannot save a
  // guest with vhost-user devices), the boot port (a virtio serial port on this unix socket,
  // QEMU listening), QEMU's monitor on `qmp_socket`; the virtio-fs, vsock and NIC backends on
  // the command line, their devices added through the monitor (HotplugDevices).
  std::string boot_port_socket;
  std::string qmp_socket;
  int incoming_fd = -1;  // a restored copy: the template's saved state, open in QEMU
  // The guest's memory as a shared file (a template's, or "/proc/self/fd/N": a copy's memfd),
  // left out of the saved state (x-ignore-shared); else an anonymous memfd.
  std::string memory_path;
};

std::vector<std::string> QemuArgs(const VmConfig& vm);

// What a restored copy's monitor adds (device_add's arguments), in order: each virtio-fs share,
// the vsock device (unless `vsock` is false), the NIC; each at a fixed PCI slot.
std::vector<nlohmann::json> HotplugDevices(const VmConfig& vm, bool vsock = true);
// The vsock device alone: QEMU cannot save a guest with it (vhost-user-vsock is unmigratable),
// so a memory snapshot unplugs it first and plugs it in again after (microvm_tier.h).
nlohmann::json VsockDevice();

// The kernel command line of a guest whose init runs with `init_args`, on a host whose TSC
// runs at `tsc_khz` (0: unknown); `pci` for the `pc` machine.
std::string KernelCommandLine(const std::string& init_args, int64_t tsc_khz, bool pci = false);

// The virtio-fs tag of volume `index` (the root's is "root").
std::string VolumeTag(size_t index);

// VMMs other than QEMU found on the PATH ("firecracker 1.x", ...): reported, not used.
std::vector<std::string> OtherVmmsFound();

// The host's TSC frequency in kHz (/proc/cpuinfo), 0 if unknown. The microvm machine has no
// HPET or PM timer for the guest to calibrate its TSC against: without the hint, about one
// boot in seven hangs there.
int64_t HostTscKhz();

}  // namespace bulkhead::runtime::microvm
