// The initramfs a microvm guest boots from: bulkhead's init as /init, the tier's seccomp
// filter (init/guest_boot.h reads it before it leaves the initramfs) and the guest kernel's
// modules the tier needs, with their load order. A cpio archive in the kernel's "newc"
// format, uncompressed (the guest would spend longer inflating it than the host reading it).
#pragma once
#include <string>
#include <vector>

#include "common/result.h"

namespace bulkhead::runtime::microvm {

struct InitramfsFiles {
  std::string init_binary;           // host path of bulkhead-init (static)
  std::string seccomp_filter;        // the filter's compiled BPF, as bytes
  std::vector<std::string> modules;  // host paths of .ko files, in the order to load them
};

// `module` (a .ko) without the signature appended to it at build time, or as it is when it
// carries none. The guest kernel then skips checking it: Debian's kernel does not enforce
// module signatures (an unsigned module loads, tainting the kernel "E"), so the check bought
// nothing, and under TCG it cost ~90 ms of each boot for the eight modules a guest loads.
// The modules come from the kernel package apt verified, through the initramfs only init reads.
std::string WithoutModuleSignature(std::string module);

// Writes the archive to `path` (replaced atomically, mode 0600), the modules unsigned
// (WithoutModuleSignature).
Status WriteInitramfs(const std::string& path, const InitramfsFiles& files);

}  // namespace bulkhead::runtime::microvm
