// Reads a small file (procfs, cgroupfs) whole, without exceptions: such files can vanish or
// fail mid-read (ESRCH, ENODEV) when the process or group goes away.
#pragma once
#include <optional>
#include <string>

namespace bulkhead {

std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit = 1 << 20);

}  // namespace bulkhead
