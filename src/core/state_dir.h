// The state dir holds every sandbox's settings (their env secrets among them), files,
// snapshots and the API keys: it is root's alone, and the daemon refuses one that others
// could read, enter or swap.
#pragma once
#include <string>

#include "common/result.h"

namespace bulkhead::core {

// Makes `path` (0700; missing parents 0755) or checks the existing one: a directory owned by
// this process's uid and not writable by group or others, below ancestors that only root or
// this uid can change (a sticky one like /tmp counts as safe). Then takes group and other
// bits off the directory and off every entry at its top level (older versions left the
// database and some directories readable). kInvalid with what to fix otherwise.
Status SecureStateDir(const std::string& path);

}  // namespace bulkhead::core
