// Unpacking an image's rootfs tarball safely.
#pragma once
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

// Unpacks tar_path (any format and compression libarchive reads) into rootfs_dir, an
// existing empty directory. Owners, modes and times are kept; device nodes and fifos are
// skipped. The extraction runs in a thread of its own chrooted into rootfs_dir, with
// libarchive's secure-symlink/no-dotdot/no-absolute checks, so no entry can land outside.
// kInvalid for a bad archive or an entry that tries to escape, kDiskFull when out of space.
Status ExtractRootfsTarball(const std::string& tar_path, const std::string& rootfs_dir);

// Makes the directories a sandbox mounts over (proc sys dev tmp run workspace) real
// directories: created when absent, a symlink or file at one of those names is replaced.
Status EnsureMountPoints(const std::string& rootfs_dir);

}  // namespace bulkhead::storage
