// The microvm isolation tier: each sandbox is a virtual machine with a guest kernel of its own
// (Debian's cloud kernel, booted by QEMU's `microvm` machine), whose PID 1 is bulkhead's init.
// The sandbox's code never talks to the host kernel: it reaches the host only through QEMU's
// emulated devices and the vhost-user daemons behind them.
//
// Per sandbox, all in the sandbox's cgroups and none as host root:
//   - QEMU (-runas the sandbox's unprivileged host uid, its own seccomp filter, a network
//     namespace of its own: the sandbox's), booting the guest kernel with the tier's initramfs
//     (init, the seccomp filter, the guest's modules: runtime/microvm/initramfs.h). A sandbox
//     that boots in network mode none has no NIC; in the other modes a virtio-net NIC on a tap
//     in that namespace (common/guest_link.h), where the daemon's rules send everything it
//     sends to the egress proxy and the resolver at the tap's address (net/netns.h);
//   - a virtiofsd serving the sandbox's root filesystem: the image idmapped under the sandbox's
//     writable layer, assembled in the helper's private mount namespace (launch.h), run as root
//     of the sandbox's user namespace and chrooted there, so files the guest writes land in the
//     writable layer with the sandbox's host ids (snapshots, forks and the disk quota work as
//     on native); one more virtiofsd per named volume, idmapped the same way;
//   - vhost-device-vsock: the guest's vsock, Firecracker's host model (a unix socket and
//     "CONNECT <port>"), through which the daemon reaches init (runtime/tier.h VsockDeviceDialer)
//     and init tells the daemon it serves (ctl::kGuestReadyPort).
// Init builds the sandbox's world inside the guest itself (init/guest_boot.h).
//
// KVM where a probe guest boots under it, else TCG (accelerator.h). Limits: the guest's memory
// and vCPUs are the sandbox's memory (at least kMinGuestMb) and CPUs (rounded up); the host's
// cgroups bound QEMU and its daemons around it (HostLimits); init enforces the pids limit in
// the guest. Pause is the host's cgroup freezer (the guest's clock stops with it).
//
// A sandbox whose guest shape has a template (template.h) starts as a restored copy of it
// rather than a boot: QEMU's `pc` machine then, its devices hotplugged, its memory a copy of
// the template's (HelperPlan::memory_copy).
//
// Warm pools hold guests of the default shape with no NIC (BootShape; Capabilities::nic_from_boot).
//
// Memory snapshots (memory_image.h) of guests restored from a template, with QEMU 8.2 or newer:
// the snapshot's freeze holds the guest's workload (init's freezer inside it) while its kernel
// lets the vsock device go and QEMU saves it; a restore starts a new QEMU from the image as a
// template copy starts from its template.
//
// Not yet: a live memory change, IPv6 inside the guest.
#pragma once
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cgroup.h"
#include "runtime/microvm/accelerator.h"
#include "runtime/microvm/template.h"
#include "runtime/microvm/vmm.h"
#include "runtime/tier.h"

namespace bulkhead::runtime::microvm {

class MicrovmTier : public Tier {
 public:
  // `tag` names this daemon's cgroup parent and its VM directory root; the tier keeps its
  // initramfs in <state_dir>/microvm.
  static Result<std::unique_ptr<MicrovmTier>> Create(const std::string& tag, const std::string& state_dir,
                                                     const std::string& init_binary, Installed installed,
                                                     bool templates = true, bool memory_snapshots = false);
  ~MicrovmTier() override;

  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override;
  std::string ProxyHost() const override;
  std::vector<std::pair<std::string, std::string>> Details() const override;
  std::vector<std::pair<std::string, std::string>> SandboxDetails(const std::string& id) const override;
  Result<SandboxHandle> Launch(const LaunchSpec& spec) override;
  std::shared_ptr<const InitDialer> Dialer(const std::string& staging) const override;
  Result<NetworkAttachment> AttachNetwork(const SandboxHandle& handle) override;
  Status SetLimits(const std::string& id, const Limits& limits) override;
  std::string BootShape(const Limits& limits) const override;
  Status Foreground(const std::string& id) override { return cgroups_.SetBackground(id, false); }
  Result<Usage> SandboxUsage(const std::string& id) override { return cgroups_.Usage(id); }
  Status SetFrozen(const std::string& id, bool frozen) override;
  bool Frozen(const std::string& id) override { return cgroups_.Frozen(id); }
  bool Alive(const SandboxHandle& handle) override;
  Status Destroy(const std::string& id, const SandboxHandle& handle) override;
  std::vector<std::string> Leftovers() override;
  Status Reattach(const std::string& id, const SandboxHandle& handle, const Limits& limits,
                  const std::string& staging) override;
  Status Checkpoint(const std::string& id, const SandboxHandle& handle, const std::string& image_dir) override;
  std::string MemoryFormat() const override;
  Status Rename(const std::string& from, const std::string& to) override { return cgroups_.Rename(from, to); }
  void Release() override;

  // The smallest guest: the guest kernel and init need ~60 MiB of it.
  static constexpr int64_t kMinGuestMb = 128;
  // The guest's size for a sandbox's limits.
  static int64_t GuestMemoryMb(const Limits& limits);
  static int VcpusFor(const Limits& limits);
  // The host cgroup limits around a guest: its memory, QEMU's own (with TCG, its translation
  // cache) and the device daemons'; their threads.
  static Limits HostLimits(const Limits& sandbox, bool kvm);

 private:
  MicrovmTier(Cgroups cgroups, std::string dir, std::string vms_root, Installed installed, bool templates,
              bool memory_snapshots);

  std::string VmDir(const std::string& id) const { return vms_root_ + "/" + id; }
  // Whether memory snapshots are on (unless serve --no-microvm-memory-snapshots) and work here: QEMU
  // saves virtio-fs, and sandboxes start as copies.
  bool MemorySnapshots() const { return want_memory_snapshots_ && installed_.qemu_release >= 802 && use_templates_; }
  // Waits for the accelerator probe (Create starts it).
  const Accelerator& Chosen() const;
  // What every guest's QEMU shares (the binary, kernel, initramfs, accelerator).
  VmConfig BaseConfig(const GuestShape& shape) const;
  // Starts guest `id`'s vsock device daemon (its log in `staging`), once it listens.
  Result<pid_t> StartVsockDevice(const std::string& id, const std::string& staging, uid_t host_uid,
                                 const std::vector<int>& join_fds);
  // Ends guest `id`'s vsock device daemon and starts another (its device unplugged meanwhile).
  struct Guest;
  Status RestartVsockDevice(const std::string& id, Guest& guest);
  Status ServeAfterPlug(const std::string& id, Guest& guest, const std::function<bool()>& alive,
                        std::chrono::steady_clock::time_point deadline);
  // Boots and saves the template guest of `shape` (template.h); its saved state's path.
  Result<std::string> BuildShape(const GuestShape& shape, const std::atomic<bool>& stopping);

  const std::string name_ = "microvm";
  Cgroups cgroups_;
  std::string dir_;       // <state>/microvm: the initramfs
  std::string vms_root_;  // /run/bulkhead-vms-<tag>: one directory of sockets per guest
  Installed installed_;
  bool use_templates_;
  bool want_memory_snapshots_;
  std::shared_future<Accelerator> accelerator_;

  struct Guest {
    int64_t memory_mb = 0;
    int vcpus = 0;
    bool restored = false;  // from a template or a memory image, not booted
    pid_t qemu = 0;
    bool saved = false;     // a memory snapshot left it stopped: it runs again when thawed
    std::vector<pid_t> children;  // this daemon's children (QEMU, the daemons), reaped at Destroy
    pid_t vsock_device = 0;       // its vsock device daemon, where this daemon started it
    std::string staging;          // the sandbox's directory of the core's (logs)
  };
  mutable std::mutex mu_;
  std::map<std::string, Guest> guests_;
  Templates templates_{
      [this](const GuestShape& shape, const std::atomic<bool>& stopping) { return BuildShape(shape, stopping); }};
};

}  // namespace bulkhead::runtime::microvm
