// One layer of a pulled image applied onto the tree the layers below it made, as the OCI image
// spec's "image layer filesystem changeset" says: an entry replaces what was at its path (a
// directory over a directory merges), a whiteout (DIR/.wh.NAME) deletes DIR/NAME, an opaque
// marker (DIR/.wh..wh..opq) empties DIR of what lower layers put there.
#pragma once
#include <cstdint>
#include <string>

#include "common/result.h"

namespace bulkhead::storage {

struct LayerApplyStats {
  int64_t entries = 0;          // written: files, directories, symlinks, hard links
  int64_t bytes = 0;            // file data written
  int64_t whiteouts = 0;        // whiteouts and opaque markers
  int64_t skipped_special = 0;  // device nodes, fifos, sockets (the runtime makes /dev)
};

// Applies the layer archive at blob_path (a tar, plain, gzip or zstd, as detected) onto
// rootfs_dir (empty for the first layer). Extracted as an image import is
// (storage/image_extract.h): chrooted into rootfs_dir, owners moved into the stored range,
// setuid/setgid bits kept on those owners, no file capabilities. Whiteouts remove with *at()
// calls from directories opened without following symlinks, and spare what this layer wrote
// whatever the order of the entries. Hostile input is refused with kInvalid (invalid_image)
// naming the entry: absolute or ".." names and hard link targets, whiteouts of "." or "..",
// and anything written or whited out through a symlink. kDiskFull when out of space. On an
// error the tree is left part-applied: the caller discards it.
Result<LayerApplyStats> ApplyLayer(const std::string& blob_path, const std::string& rootfs_dir);

}  // namespace bulkhead::storage
