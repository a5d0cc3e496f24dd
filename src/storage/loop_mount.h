// The quota filesystem: a sparse image file formatted once and mounted through a loop
// device that this process attaches itself (no losetup/mount binaries).
#pragma once
#include <cstdint>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

enum class FsType { kNone, kXfs, kBtrfs, kOther };

// What filesystem the image holds, from its superblock magic.
Result<FsType> ProbeFilesystem(const std::string& image_path);

// Creates the sparse image file of size bytes if it does not exist yet.
Status CreateSparseImage(const std::string& image_path, int64_t bytes);

// Runs mkfs for type on the image (overwriting whatever is there).
Status MakeFilesystem(const std::string& image_path, FsType type);

// Attaches the image to a free loop device (autoclear) and mounts it at mount_point with
// fs_type and data options. Once mounted the loop device goes away when it is unmounted.
// Returns the loop device's path, e.g. /dev/loop3.
Result<std::string> MountImage(const std::string& image_path, const std::string& mount_point,
                               const std::string& fs_type, const std::string& options);

}  // namespace bulkhead::storage
