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

// Writes the archive to `path` (replaced atomically, mode 0600).
Status WriteInitramfs(const std::string& path, const InitramfsFiles& files);

}  // namespace bulkhead::runtime::microvm
