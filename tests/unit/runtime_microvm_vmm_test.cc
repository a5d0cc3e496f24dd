// The microvm tier's QEMU command line and its look for what install-microvm.sh installs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/microvm/microvm_tier.h"
#include "runtime/microvm/vmm.h"

namespace bulkhead::runtime::microvm {
namespace {

bool Has(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); i++)
    if (args[i] == flag && args[i + 1] == value) return true;
  return false;
}

VmConfig Guest() {
  VmConfig vm;
  vm.qemu = "/usr/bin/qemu-system-x86_64";
  vm.kernel = "/k/vmlinux";
  vm.initramfs = "/k/initramfs.cpio";
  vm.command_line = KernelCommandLine("--guest 7b7d", 2600000);
  vm.vcpus = 2;
  vm.memory_mb = 512;
  vm.console_log = "/s/console.log";
  vm.virtiofs_sockets = {"/vm/fs0.sock", "/vm/fs1.sock"};
  vm.vsock_socket = "/vm/vsock.sock";
  vm.run_uid = 0x10010000;
  vm.name = "bulkhead-sb-1";
  return vm;
}

TEST(QemuArgs, AGuestHasItsSizeSharedMemoryAndNoDevicesButItsOwn) {
  const auto args = QemuArgs(Guest());
  EXPECT_EQ(args[0], "/usr/bin/qemu-system-x86_64");
  EXPECT_TRUE(Has(args, "-m", "512M"));
  EXPECT_TRUE(Has(args, "-smp", "2"));
  EXPECT_TRUE(Has(args, "-object", "memory-backend-memfd,id=mem,size=512M,share=on"));
  EXPECT_TRUE(Has(args, "-M", "microvm,x-option-roms=off,memory-backend=mem"));
  EXPECT_TRUE(Has(args, "-bios", "qboot.rom"));
  EXPECT_TRUE(Has(args, "-nic", "none"));
  EXPECT_NE(std::find(args.begin(), args.end(), "-nodefaults"), args.end());
  EXPECT_TRUE(Has(args, "-device", "vhost-user-fs-device,chardev=fs0,tag=root"));
  EXPECT_TRUE(Has(args, "-device", "vhost-user-fs-device,chardev=fs1,tag=v0"));
  EXPECT_TRUE(Has(args, "-chardev", "socket,id=vsock,path=/vm/vsock.sock"));
  EXPECT_TRUE(Has(args, "-runas", "268500992:268500992"));
  EXPECT_TRUE(Has(args, "-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny"));
  EXPECT_TRUE(Has(args, "-chardev", "file,id=console,path=/s/console.log"));
}

TEST(QemuArgs, QemuFrom9Point1DropsPrivilegesWithRunWith) {
  VmConfig vm = Guest();
  vm.qemu_release = 1000;
  const auto args = QemuArgs(vm);
  EXPECT_TRUE(Has(args, "-run-with", "user=268500992:268500992"));
  EXPECT_EQ(std::find(args.begin(), args.end(), "-runas"), args.end());
}

TEST(QemuRelease, ReadsMajorAndMinorFromTheVersionLine) {
  EXPECT_EQ(QemuRelease("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"), 1000);
  EXPECT_EQ(QemuRelease("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"), 702);
  EXPECT_EQ(QemuRelease("QEMU emulator version 9.1"), 901);
  EXPECT_EQ(QemuRelease("something else"), 0);
}

TEST(QemuArgs, KvmTakesTheHostCpuAndTcgABoundedTranslationCache) {
  VmConfig vm = Guest();
  vm.kvm = true;
  auto args = QemuArgs(vm);
  EXPECT_TRUE(Has(args, "-accel", "kvm"));
  EXPECT_TRUE(Has(args, "-cpu", "host"));
  vm.kvm = false;
  args = QemuArgs(vm);
  EXPECT_TRUE(Has(args, "-accel", "tcg,tb-size=128"));
  EXPECT_TRUE(Has(args, "-cpu", "max"));
}

TEST(QemuArgs, WithoutSocketsThereAreNoVhostDevicesAndRootStaysUnlessAUidIsGiven) {
  VmConfig vm = Guest();
  vm.virtiofs_sockets.clear();
  vm.vsock_socket.clear();
  vm.run_uid = 0;
  const auto args = QemuArgs(vm);
  for (const auto& arg : args) {
    EXPECT_EQ(arg.find("vhost-user"), std::string::npos) << arg;
    EXPECT_NE(arg, "-runas");
  }
}

TEST(QemuArgs, ANicOnlyWithATapAndThenOnItsDescriptorWithoutVhost) {
  VmConfig vm = Guest();
  for (const auto& arg : QemuArgs(vm)) EXPECT_NE(arg, "-netdev");
  vm.tap_fd = 3;
  const auto args = QemuArgs(vm);
  EXPECT_TRUE(Has(args, "-netdev", "tap,id=net0,vhost=off,fd=3"));
  EXPECT_TRUE(Has(args, "-device", "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56"));
  EXPECT_TRUE(Has(args, "-nic", "none"));  // no default NIC beside it
}

VmConfig Restored() {
  VmConfig vm = Guest();
  vm.command_line = KernelCommandLine("--guest-template", 2600000, /*pci=*/true);
  vm.boot_port_socket = "/vm/boot.sock";
  vm.qmp_socket = "/vm/qmp.sock";
  vm.incoming_fd = 4;
  vm.memory_path = "/proc/self/fd/5";
  vm.tap_fd = 3;
  return vm;
}

TEST(QemuArgs, ARestoredCopyIsAPcMachineOnItsMemoryFileWithTheBackendsButNotTheDevices) {
  const auto args = QemuArgs(Restored());
  EXPECT_TRUE(Has(args, "-M", "pc,memory-backend=mem"));
  EXPECT_TRUE(Has(args, "-object", "memory-backend-file,id=mem,size=512M,share=on,mem-path=/proc/self/fd/5"));
  EXPECT_TRUE(Has(args, "-incoming", "defer"));  // the monitor sets x-ignore-shared first
  EXPECT_TRUE(Has(args, "-qmp", "unix:/vm/qmp.sock,server=on,wait=off"));
  EXPECT_TRUE(Has(args, "-chardev", "socket,id=boot,path=/vm/boot.sock,server=on,wait=off"));
  EXPECT_TRUE(Has(args, "-device", "virtserialport,chardev=boot,name=bulkhead.boot"));
  EXPECT_TRUE(Has(args, "-chardev", "socket,id=fs1,path=/vm/fs1.sock"));
  EXPECT_TRUE(Has(args, "-netdev", "tap,id=net0,vhost=off,fd=3"));
  EXPECT_TRUE(Has(args, "-runas", "268500992:268500992"));
  EXPECT_TRUE(Has(args, "-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny"));
  for (const auto& arg : args) {
    EXPECT_EQ(arg.find("vhost-user-"), std::string::npos) << arg;
    EXPECT_EQ(arg.find("virtio-net"), std::string::npos) << arg;
  }
}

TEST(QemuArgs, ATemplateHasTheBootPortAndNoIncomingState) {
  VmConfig vm = Restored();
  vm.incoming_fd = -1;
  vm.virtiofs_sockets.clear();
  vm.vsock_socket.clear();
  vm.tap_fd = -1;
  for (const auto& arg : QemuArgs(vm)) {
    EXPECT_NE(arg, "-incoming");
    EXPECT_NE(arg, "-netdev");
  }
  EXPECT_TRUE(HotplugDevices(vm).empty());
}

TEST(HotplugDevices, EachShareThenVsockThenTheNicOnPci) {
  const auto devices = HotplugDevices(Restored());
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_EQ(devices[0], (nlohmann::json{
                            {"driver", "vhost-user-fs-pci"}, {"id", "fs0"}, {"chardev", "fs0"}, {"tag", "root"}, {"addr", "0x5"}}));
  EXPECT_EQ(devices[1]["tag"], "v0");
  EXPECT_EQ(devices[1]["addr"], "0x6");
  EXPECT_EQ(devices[2], (nlohmann::json{
                            {"driver", "vhost-user-vsock-pci"}, {"id", "vsock"}, {"chardev", "vsock"}, {"addr", "0x3"}}));
  EXPECT_EQ(devices[2], VsockDevice());
  EXPECT_EQ(devices[3]["driver"], "virtio-net-pci");
  EXPECT_EQ(devices[3]["addr"], "0x4");
  EXPECT_EQ(devices[3]["netdev"], "net0");
  EXPECT_EQ(devices[3]["mac"], "52:54:00:12:34:56");
}

TEST(HotplugDevices, ARestoredMemoryImageGetsItsVsockLast) {
  const auto devices = HotplugDevices(Restored(), /*vsock=*/false);
  ASSERT_EQ(devices.size(), 3u);
  for (const auto& device : devices) EXPECT_NE(device["driver"], "vhost-user-vsock-pci");
}

TEST(KernelCommandLine, OnlyThePcMachineKeepsPci) {
  EXPECT_NE(KernelCommandLine("--guest-template", 0).find(" pci=off "), std::string::npos);
  EXPECT_EQ(KernelCommandLine("--guest-template", 0, /*pci=*/true).find("pci=off"), std::string::npos);
}

TEST(KernelCommandLine, InitsArgumentsFollowTheSeparatorAndThePanicEndsTheGuest) {
  const std::string line = KernelCommandLine("--guest-probe", 2600000);
  EXPECT_NE(line.find("panic=-1"), std::string::npos);
  EXPECT_NE(line.find(" tsc_early_khz=2600000 "), std::string::npos);
  EXPECT_EQ(KernelCommandLine("--guest-probe", 0).find("tsc_early_khz"), std::string::npos);
  EXPECT_NE(line.find("rdinit=/init"), std::string::npos);
  EXPECT_EQ(line.substr(line.size() - std::string(" -- --guest-probe").size()), " -- --guest-probe");
}

TEST(FindInstalled, NamesWhatIsMissingAndTheScriptThatInstallsIt) {
  const std::string empty = std::filesystem::temp_directory_path() / "bulkhead-no-microvm";
  std::filesystem::create_directories(empty);
  auto found = FindInstalled(empty);
  std::filesystem::remove_all(empty);
  ASSERT_FALSE(found);
  EXPECT_NE(found.error().message.find("install-microvm.sh"), std::string::npos) << found.error().message;
}

TEST(MicrovmLimits, TheGuestIsAtLeastTheSmallestThatBootsAndTheHostBoundsItWithRoom) {
  Limits small{.cpus = 0.5, .memory_mb = 64, .pids = 100};
  EXPECT_EQ(MicrovmTier::GuestMemoryMb(small), MicrovmTier::kMinGuestMb);
  EXPECT_EQ(MicrovmTier::VcpusFor(small), 1);
  Limits big{.cpus = 1.5, .memory_mb = 2048, .pids = 100};
  EXPECT_EQ(MicrovmTier::GuestMemoryMb(big), 2048);
  EXPECT_GE(MicrovmTier::VcpusFor(big), 1);
  EXPECT_GT(MicrovmTier::HostLimits(big, true).memory_mb, 2048);
  EXPECT_GT(MicrovmTier::HostLimits(big, false).memory_mb, MicrovmTier::HostLimits(big, true).memory_mb);
}

}  // namespace
}  // namespace bulkhead::runtime::microvm
