// The "host" image: a read-only view of the host OS. Its rootfs holds only mount points
// (the runtime bind-mounts /usr and the real /bin /lib* dirs read-only over them; usr/ may
// hold a few additions, e.g. bin/python -> python3 and bin/sudo, shown over the host's /usr),
// the host's /bin /lib* symlinks, and a generated /etc with a few vetted host files copied
// in. Nothing secret (shadow, ssh keys, /root, /home, the state dir) is ever copied.
#pragma once
#include <string>
#include <vector>

#include "common/result.h"

namespace bulkhead::storage {

// "/usr" plus those of /bin /sbin /lib /lib32 /lib64 /libx32 that are real directories.
std::vector<std::string> HostBindDirs();

// Makes sure <host_image_dir>/v-<hash of the inputs> exists and <host_image_dir>/rootfs
// points at it; builds it when the host's inputs changed. Returns the versioned directory.
// Directories are never modified once built. state_dir is never copied from. sudo_binary
// (bulkhead-init, a multicall binary) becomes usr/bin/sudo, shadowing any host sudo.
Result<std::string> EnsureHostImageAt(const std::string& host_image_dir, const std::string& state_dir,
                                      const std::string& sudo_binary);

}  // namespace bulkhead::storage
