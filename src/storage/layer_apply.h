// One layer of a pulled image applied onto the tree of the layers below it, as the OCI image
// spec's "filesystem changeset" says: entries replace what was at their path, whiteouts
// (.wh.NAME) delete, opaque markers (.wh..wh..opq) empty a directory of what lower layers put there.
#pragma once
#include <cstdint>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

struct LayerApplyStats {
  int64_t entries = 0;          // written: files, directories, links
  int64_t whiteouts = 0;        // deletions and opaque directories
  int64_t skipped_special = 0;  // device nodes, fifos, sockets (the runtime makes /dev)
};

// Applies the layer archive at blob_path (a tar, plain, gzip or zstd) onto rootfs_dir. Runs
// chrooted into rootfs_dir (storage/fs_util.h RunChrooted), so nothing lands outside it,
// whatever the names, links or symlinks in the tree; names with "..", absolute names and hard
// links out are refused (kInvalid, invalid_image). Owners move to the stored range as an
// import's do; setuid bits are kept on those owners. kDiskFull when out of space.
Result<LayerApplyStats> ApplyLayer(const std::string& blob_path, const std::string& rootfs_dir);

}  // namespace bulkhead::storage
