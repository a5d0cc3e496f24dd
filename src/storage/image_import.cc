#include "storage/image_import.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/id_ranges.h"
#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/image_extract.h"

namespace bulkhead::storage {

Status ExtractRootfsTarball(const std::string& tar_path, const std::string& rootfs_dir) {
  return ExtractImageArchive(tar_path, rootfs_dir, ImageArchiveKind::kAnyArchive, [](ImageExtraction& x) -> Status {
    int skipped_special = 0;
    for (;;) {
      auto next = x.Next();
      if (!next.ok()) return next.error();
      if (!next->has_value()) break;
      const ImageArchiveEntry& e = **next;
      if (e.is_special()) {
        ++skipped_special;  // device nodes, fifos, sockets: /dev is made by the runtime
        continue;
      }
      auto written = x.Write(e);
      if (!written.ok()) return written.error();
    }
    BH_TRY(x.Finish());
    if (skipped_special > 0) spdlog::info("image import: skipped {} device nodes/fifos/sockets", skipped_special);
    return {};
  });
}

Status EnsureMountPoints(const std::string& rootfs_dir) {
  UniqueFd root = OpenDirNoFollow(rootfs_dir);
  if (!root) return SystemError("open " + rootfs_dir, errno);
  struct MountPoint {
    const char* name;
    mode_t mode;
  };
  for (MountPoint mp : {MountPoint{"proc", 0555}, MountPoint{"sys", 0555}, MountPoint{"dev", 0755},
                        MountPoint{"tmp", 01777}, MountPoint{"run", 0755}, MountPoint{"workspace", 0755}}) {
    struct stat st;
    if (::fstatat(root.get(), mp.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode)) {
        if (std::string(mp.name) == "tmp") BH_TRY(MakeDirAt(root.get(), mp.name, mp.mode, st.st_uid, st.st_gid));
        continue;
      }
      // A symlink here would make the runtime's mount land somewhere else.
      if (::unlinkat(root.get(), mp.name, 0) != 0) return SystemError(std::string("unlink ") + mp.name, errno);
    }
    BH_TRY(MakeDirAt(root.get(), mp.name, mp.mode, kStoredIdBase, kStoredIdBase));
  }
  return {};
}

}  // namespace bulkhead::storage
