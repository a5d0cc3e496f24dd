#include "runtime/microvm/vmm.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <sstream>

#include "common/ctl_protocol.h"
#include "common/guest_link.h"
#include "common/read_file.h"
#include "common/run_program.h"

namespace bulkhead::runtime::microvm {
namespace {

Error Missing(const std::string& what) {
  return MakeError(ErrorCode::kUnavailable, what + " (scripts/install-microvm.sh installs it)");
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

// The version a daemon's `--version` prints ("virtiofsd 1.14.0" -> "1.14.0").
Result<std::string> VersionOf(const std::string& binary) {
  if (::access(binary.c_str(), X_OK) != 0) return Missing("no " + binary);
  auto out = RunProgramOutput({binary, "--version"});
  if (!out) return Missing(binary + " does not run: " + out.error().message);
  std::string line = FirstLine(*out);
  return line.substr(line.find_last_of(' ') + 1);
}

}  // namespace

Result<Installed> FindInstalled(const std::string& dir) {
  Installed found;
  found.qemu = FindProgram({"/usr/bin/qemu-system-x86_64", "/usr/local/bin/qemu-system-x86_64"});
  if (found.qemu.empty()) return Missing("no qemu-system-x86_64");
  auto version = RunProgramOutput({found.qemu, "--version"});
  if (!version) return Missing(found.qemu + " does not run: " + version.error().message);
  found.qemu_version = FirstLine(*version);
  found.qemu_release = QemuRelease(found.qemu_version);
  found.kernel = dir + "/vmlinux";
  if (::access(found.kernel.c_str(), R_OK) != 0) return Missing("no guest kernel " + found.kernel);
  found.kernel_version = FirstLine(ReadSmallFile(dir + "/kernel-version").value_or("unknown"));
  auto order = ReadSmallFile(dir + "/modules/order");
  if (!order) return Missing("no guest kernel modules in " + dir + "/modules");
  std::istringstream names(*order);
  for (std::string name; std::getline(names, name);) {
    if (name.empty()) continue;
    const std::string module = dir + "/modules/" + name;
    if (::access(module.c_str(), R_OK) != 0) return Missing("no guest kernel module " + module);
    found.modules.push_back(module);
  }
  found.virtiofsd = dir + "/virtiofsd";
  auto virtiofsd = VersionOf(found.virtiofsd);
  if (!virtiofsd) return virtiofsd.error();
  found.virtiofsd_version = *virtiofsd;
  found.vsock_device = dir + "/vhost-device-vsock";
  auto vsock = VersionOf(found.vsock_device);
  if (!vsock) return vsock.error();
  found.vsock_device_version = *vsock;
  found.tsc_khz = HostTscKhz();
  found.other_vmms = OtherVmmsFound();
  return found;
}

int QemuRelease(const std::string& version_line) {
  const std::string prefix = "version ";
  const size_t at = version_line.find(prefix);
  if (at == std::string::npos) return 0;
  int major = 0, minor = 0;
  if (std::sscanf(version_line.c_str() + at + prefix.size(), "%d.%d", &major, &minor) != 2) return 0;
  return major * 100 + minor;
}

std::string VolumeTag(size_t index) { return "v" + std::to_string(index); }

namespace {
// Virtio-fs share i's chardev id and tag: the root first, then each volume.
std::string ShareId(size_t i) { return "fs" + std::to_string(i); }
std::string ShareTag(size_t i) { return i == 0 ? "root" : VolumeTag(i - 1); }
}  // namespace

std::string KernelCommandLine(const std::string& init_args, int64_t tsc_khz, bool pci) {
  // quiet and loglevel=0: the console (a file) gets init's words, not the kernel's boot log.
  // panic=-1 with QEMU's -no-reboot: a guest whose init failed ends its VMM at once.
  // cryptomgr.notests: the self-tests of every crypto algorithm the kernel registers took a
  // quarter of a second of each boot under TCG (initcall_debug: crypto_algapi_init, 254 ms);
  // they check the kernel's own implementations, the same in every boot. pci=off: microvm's
  // devices are virtio-mmio. The rest of the line is init's.
  std::string line = std::string("console=ttyS0 quiet loglevel=0 panic=-1 cryptomgr.notests ") + (pci ? "" : "pci=off ") +
                     "rdinit=/init";
  if (tsc_khz > 0) line += " tsc_early_khz=" + std::to_string(tsc_khz);
  return line + " -- " + init_args;
}

std::vector<std::string> QemuArgs(const VmConfig& vm) {
  const std::string memory = std::to_string(vm.memory_mb) + "M";
  const bool pc = !vm.boot_port_socket.empty();
  std::vector<std::string> args = {
      vm.qemu, "-name", vm.name,
      // No option ROMs: the kernel boots by PVH, straight from its ELF note.
      "-M", pc ? "pc,memory-backend=mem" : "microvm,x-option-roms=off,memory-backend=mem",
      // Guest memory in a memfd QEMU shares with the vhost-user daemons (they map it).
      "-object", vm.memory_path.empty() ? "memory-backend-memfd,id=mem,size=" + memory + ",share=on"
                                        : "memory-backend-file,id=mem,size=" + memory + ",share=on,mem-path=" + vm.memory_path,
      "-m", memory, "-smp", std::to_string(vm.vcpus),
      "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-nic", "none",
      "-chardev", "file,id=console,path=" + vm.console_log, "-serial", "chardev:console",
      "-kernel", vm.kernel, "-initrd", vm.initramfs, "-append", vm.command_line,
      // QEMU's own seccomp filter: no exec, no obsolete syscalls, no changes of priority or
      // affinity (privileges stay allowed: -runas drops them after the filter is in).
      "-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny"};
  // microvm's firmware named: qboot, which starts the kernel QEMU loaded without an option ROM
  // (Debian's QEMU 10 otherwise gives microvm SeaBIOS, which needs one).
  if (!pc) args.insert(args.end(), {"-bios", "qboot.rom"});
  if (vm.kvm) {
    args.insert(args.end(), {"-accel", "kvm", "-cpu", "host"});
  } else {
    // tb-size: the translation cache; the default (1 GiB) would be most of the guest's cost.
    args.insert(args.end(), {"-accel", "tcg,tb-size=128", "-cpu", "max"});
  }
  if (pc) {
    args.insert(args.end(), {"-chardev", "socket,id=boot,path=" + vm.boot_port_socket + ",server=on,wait=off",
                             "-device", "virtio-serial-pci,max_ports=2", "-device",
                             std::string("virtserialport,chardev=boot,name=") + ctl::kGuestTemplatePort,
                             "-qmp", "unix:" + vm.qmp_socket + ",server=on,wait=off"});
    // (The monitor sets x-ignore-shared, then starts the load: template.h StartCopy.)
    if (vm.incoming_fd >= 0) args.insert(args.end(), {"-incoming", "defer"});
  }
  for (size_t i = 0; i < vm.virtiofs_sockets.size(); i++) {
    args.insert(args.end(), {"-chardev", "socket,id=" + ShareId(i) + ",path=" + vm.virtiofs_sockets[i]});
    if (!pc) args.insert(args.end(), {"-device", "vhost-user-fs-device,chardev=" + ShareId(i) + ",tag=" + ShareTag(i)});
  }
  if (!vm.vsock_socket.empty()) {
    args.insert(args.end(), {"-chardev", "socket,id=vsock,path=" + vm.vsock_socket});
    if (!pc) args.insert(args.end(), {"-device", "vhost-user-vsock-device,chardev=vsock"});
  }
  if (vm.tap_fd >= 0) {
    // vhost=off: no vhost-net here (and QEMU does the device's work in user space).
    args.insert(args.end(), {"-netdev", "tap,id=net0,vhost=off,fd=" + std::to_string(vm.tap_fd)});
    if (!pc) args.insert(args.end(), {"-device", std::string("virtio-net-device,netdev=net0,mac=") + guest_link::kGuestMac});
  }
  if (vm.run_uid != 0) {
    const std::string ids = std::to_string(vm.run_uid) + ":" + std::to_string(vm.run_uid);
    // -run-with user= since 9.1; -runas was removed in 10.0.
    if (vm.qemu_release >= 901)
      args.insert(args.end(), {"-run-with", "user=" + ids});
    else
      args.insert(args.end(), {"-runas", ids});
  }
  return args;
}

namespace {
// Each device's PCI slot, fixed: a memory image's devices must be where the saved guest had
// them when it is restored (slot 2 is the boot port's virtio-serial, the first on the command line).
std::string Slot(int slot) { return fmt::format("{:#x}", slot); }
constexpr int kVsockSlot = 3, kNicSlot = 4, kFirstShareSlot = 5;
}  // namespace

nlohmann::json VsockDevice() {
  return {{"driver", "vhost-user-vsock-pci"}, {"id", "vsock"}, {"chardev", "vsock"}, {"addr", Slot(kVsockSlot)}};
}

std::vector<nlohmann::json> HotplugDevices(const VmConfig& vm, bool vsock) {
  std::vector<nlohmann::json> devices;
  for (size_t i = 0; i < vm.virtiofs_sockets.size(); i++)
    devices.push_back({{"driver", "vhost-user-fs-pci"},
                       {"id", ShareId(i)},
                       {"chardev", ShareId(i)},
                       {"tag", ShareTag(i)},
                       {"addr", Slot(kFirstShareSlot + static_cast<int>(i))}});
  if (vsock && !vm.vsock_socket.empty()) devices.push_back(VsockDevice());
  if (vm.tap_fd >= 0)
    devices.push_back({{"driver", "virtio-net-pci"},
                       {"id", "nic"},
                       {"netdev", "net0"},
                       {"mac", guest_link::kGuestMac},
                       {"addr", Slot(kNicSlot)}});
  return devices;
}

std::vector<std::string> OtherVmmsFound() {
  std::vector<std::string> found;
  for (const char* name : {"firecracker", "cloud-hypervisor"}) {
    const std::string path = FindProgram({std::string("/usr/bin/") + name, std::string("/usr/local/bin/") + name});
    if (path.empty()) continue;
    auto version = RunProgramOutput({path, "--version"});
    found.push_back(version ? FirstLine(*version) : path);
  }
  return found;
}

int64_t HostTscKhz() {
  std::istringstream lines(ReadSmallFile("/proc/cpuinfo", 4 << 20).value_or(""));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return 0;
    return std::llround(std::strtod(line.c_str() + colon + 1, nullptr) * 1000);
  }
  return 0;
}

}  // namespace bulkhead::runtime::microvm
