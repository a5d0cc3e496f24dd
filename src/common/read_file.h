// Reads a small file (procfs, cgroupfs) whole, without exceptions: such files can vanish or
// fail mid-read (ESRCH, ENODEV) when the process or group goes away.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>

#include "common/result.h"

namespace bulkhead {

std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit = 1 << 20);

// The end of a log a tier's helper wrote (at most `max` bytes, trailing blanks trimmed), or
// "(nothing logged)": for an error that says why a sandbox did not start.
std::string ReadLogTail(const std::string& path, size_t max = 2048);

// Writes a whole file through a temporary beside it and a rename, with `mode`: a reader sees
// the old file or the new one, never half of it.
Status WriteWholeFile(const std::string& path, const void* data, size_t size, mode_t mode);
// mkdir that accepts an existing directory.
Status MakeDir(const std::string& path, mode_t mode);

// Writes `value` to an existing file (a sysctl, a cgroup knob) in one write.
Status WriteSmallFile(const std::string& path, const std::string& value);

}  // namespace bulkhead
