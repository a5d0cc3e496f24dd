// mount(2) and mkdir(2) as Status, for the steps by which init builds or contains a sandbox
// itself (self_contain.cc, guest_boot.cc).
#pragma once
#include <sys/mount.h>

#include <cerrno>
#include <string>

#include "common/read_file.h"
#include "common/result.h"

namespace bulkhead::init {

inline Status Mount(const std::string& source, const std::string& target, const char* type, unsigned long flags,
                    const char* data) {
  if (::mount(source.c_str(), target.c_str(), type, flags, data) != 0) return SystemError("mount " + target, errno);
  return {};
}

// (MakeDir: common/read_file.h.)
using bulkhead::MakeDir;
}  // namespace bulkhead::init
