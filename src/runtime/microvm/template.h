// Template guests: fast starts for the microvm tier. A template is a guest booted once per
// guest shape (memory and vCPUs) with `init --guest-template` and no sandbox device, and
// saved by QEMU (a migration stream of its memory and devices) while its init waits on the
// boot port for a boot message. A sandbox of that shape then starts as a copy restored from
// the saved state instead of a boot: the daemon adds the sandbox's devices (virtio-fs, vsock,
// NIC) through QEMU's monitor while the copy is paused, resumes it, and sends the boot message
// with the host's clock and fresh entropy (init/guest_boot.h GuestTemplate).
//
// The template runs only bulkhead's init (no sandbox code ever runs in it), under QEMU's seccomp
// filter, as the daemon's uid: it is killed with the daemon (PR_SET_PDEATHSIG, which a change of
// uid would clear) so that a daemon killed mid-build leaves no guest behind. It is built
// in the background on a shape's first launch (which boots cold meanwhile) and again by every
// daemon start, so it always matches the installed kernel, initramfs and QEMU.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "runtime/microvm/vmm.h"

namespace bulkhead::runtime::microvm {

struct GuestShape {
  int64_t memory_mb = 0;
  int vcpus = 0;
  auto operator<=>(const GuestShape&) const = default;
  std::string Name() const;  // "256m-1cpu"
};

// Boots `vm` (a template's config: boot_port_socket and qmp_socket set, no devices) as a
// template and saves it to `saved` (replaced atomically, 0600). `log` gets QEMU's output. Gives
// up while the guest boots once `stopping` is set.
Status BuildTemplate(const VmConfig& vm, const std::string& saved, const std::string& log,
                     const std::atomic<bool>& stopping);

// Starts a copy restored from a template (`vm` with incoming_fd set; QEMU `pid` loading it):
// once the copy is paused, adds HotplugDevices(vm) through the monitor, resumes it and writes
// `boot_line` (EncodeGuestBootArg's hex) to its boot port. The port's connection, to keep until
// the guest's init serves.
Result<UniqueFd> StartCopy(const VmConfig& vm, pid_t pid, const std::string& boot_line,
                           std::chrono::steady_clock::time_point deadline);

// Where a template's guest memory is kept, beside its saved state.
inline std::string TemplateMemory(const std::string& saved) { return saved + ".memory"; }

class Templates {
 public:
  using Builder = std::function<Result<std::string>(const GuestShape&, const std::atomic<bool>& stopping)>;
  explicit Templates(Builder build) : build_(std::move(build)) {}
  ~Templates();  // tells builds under way to stop, and waits for them

  // The saved state of `shape`'s template if it is built; otherwise nothing, and the build
  // starts (in the background) unless it is under way or failed.
  std::optional<std::string> Ready(const GuestShape& shape);
  // The same, but a build under way (or started now) is waited for until `deadline`.
  std::optional<std::string> Wait(const GuestShape& shape, std::chrono::steady_clock::time_point deadline);
  // Each shape and its state: "building", "ready" or the build's error.
  std::vector<std::pair<std::string, std::string>> States() const;

 private:
  Builder build_;
  std::atomic<bool> stopping_ = false;
  mutable std::mutex mu_;
  std::map<GuestShape, std::shared_future<Result<std::string>>> builds_;
};

}  // namespace bulkhead::runtime::microvm
