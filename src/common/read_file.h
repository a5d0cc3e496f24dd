// Reads a small file (procfs, cgroupfs) whole, without exceptions: such files can vanish or
// fail mid-read (ESRCH, ENODEV) when the process or group goes away.
#pragma once
#include <optional>
#include <string>

#include "common/result.h"

namespace bulkhead {

std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit = 1 << 20);

// Writes `value` to an existing file (a sysctl, a cgroup knob) in one write.
Status WriteSmallFile(const std::string& path, const std::string& value);

}  // namespace bulkhead
