// KVM or TCG. A /dev/kvm that opens is not proof that guests run on it: under a nested
// pagetable-based hypervisor (PVM) a stock guest kernel dies at boot (QEMU aborts on MSR 0x10a
// with -cpu host). So the tier boots a probe guest under KVM (init --guest-probe, which prints
// ctl::kGuestProbeSign and powers off) and uses KVM only if it booted; else TCG, QEMU's
// software emulation (~10x slower guest CPU, but the same walls). The verdict is kept in
// /run/bulkhead for this boot of the host, this QEMU and this guest kernel.
#pragma once
#include <string>

#include "runtime/microvm/vmm.h"

namespace bulkhead::runtime::microvm {

struct Accelerator {
  bool kvm = false;
  std::string why;  // "a probe guest booted under KVM", "no /dev/kvm", ...
};

// Probes (or reads the kept verdict) with the tier's initramfs; takes up to ~20 s the first
// time on a host whose KVM hangs guests.
Accelerator ChooseAccelerator(const Installed& installed, const std::string& initramfs, const std::string& work_dir);

}  // namespace bulkhead::runtime::microvm
