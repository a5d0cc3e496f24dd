// Layers on XFS with project quotas, like Docker's overlay2 on xfs pquota: each layer
// directory gets its own project id (inherited by everything made under it) and a hard
// block and inode limit for that project.
#include <dirent.h>
#include <fcntl.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/quota.h>
#include <sys/ioctl.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <mutex>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/layer_area.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif

namespace bulkhead::storage {
namespace {

constexpr uint32_t kFirstProjectId = 1;  // 0 is every file's default project

class XfsLayerArea final : public LayerArea {
 public:
  XfsLayerArea(std::string mount_point, std::string block_device, UniqueFd mount_fd)
      : LayerArea(mount_point + "/layers"),
        mount_point_(std::move(mount_point)),
        block_device_(std::move(block_device)),
        mount_fd_(std::move(mount_fd)) {}

  std::string backend() const override { return "xfs-prjquota"; }
  bool enforced() const override { return true; }

  Status Init() {
    BH_TRY(MakeDir(root(), 0700));
    // Never hand out an id a live layer holds, even if the counter file was lost.
    auto next = ReadCounter();
    uint32_t highest_live = 0;
    if (DIR* dir = ::opendir(root().c_str())) {
      while (dirent* e = ::readdir(dir)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        auto id = ProjectIdOf(LayerPath(name));
        if (id.ok() && *id > highest_live) highest_live = *id;
      }
      ::closedir(dir);
    }
    if (highest_live + 1 > next) BH_TRY(WriteCounter(highest_live + 1));
    return {};
  }

  Status CreateLayerDir(const std::string& id, int64_t disk_mb) override {
    std::string path = LayerPath(id);
    if (::mkdir(path.c_str(), 0700) != 0) return SystemError("mkdir " + path, errno);
    auto project = AllocateProjectId();
    if (!project.ok()) return project.error();
    UniqueFd dir = OpenDirNoFollow(path);
    if (!dir) return SystemError("open " + path, errno);
    fsxattr attr{};
    if (::ioctl(dir.get(), FS_IOC_FSGETXATTR, &attr) != 0) return SystemError("FS_IOC_FSGETXATTR", errno);
    attr.fsx_projid = *project;
    attr.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    if (::ioctl(dir.get(), FS_IOC_FSSETXATTR, &attr) != 0) return SystemError("FS_IOC_FSSETXATTR", errno);
    return SetProjectLimit(*project, disk_mb);
  }

  Status SetLimit(const std::string& id, int64_t disk_mb) override {
    auto project = ProjectIdOf(LayerPath(id));
    if (!project.ok()) return project.error();
    return SetProjectLimit(*project, disk_mb);
  }

  Result<int64_t> UsageBytes(const std::string& id) const override {
    auto project = ProjectIdOf(LayerPath(id));
    if (!project.ok()) return project.error();
    fs_disk_quota quota{};
    BH_TRY(Quotactl(Q_XGETQUOTA, *project, &quota));
    return static_cast<int64_t>(quota.d_bcount) * 512;  // basic blocks
  }

  Status DestroyLayerDir(const std::string& id) override {
    std::string path = LayerPath(id);
    auto project = ProjectIdOf(path);
    BH_TRY(RemoveTree(path));
    // Drop the limits so the quota file keeps no entry for a layer that is gone.
    if (project.ok() && *project != 0) (void)SetProjectLimit(*project, 0);
    return {};
  }

 private:
  std::string CounterPath() const { return mount_point_ + "/next-project-id"; }

  uint32_t ReadCounter() const {
    auto text = ReadFile(CounterPath());
    if (!text.ok()) return kFirstProjectId;
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    (void)end;
    return ec != std::errc() || v < kFirstProjectId ? kFirstProjectId : v;
  }

  Status WriteCounter(uint32_t next) const {
    std::string tmp = CounterPath() + ".tmp";
    BH_TRY(WriteFile(tmp, std::to_string(next) + "\n", 0600));
    if (::rename(tmp.c_str(), CounterPath().c_str()) != 0) return SystemError("rename " + tmp, errno);
    return {};
  }

  Result<uint32_t> AllocateProjectId() {
    std::lock_guard lock(mu_);
    uint32_t id = ReadCounter();
    BH_TRY(WriteCounter(id + 1));  // persisted before use, so a crash never reuses it
    return id;
  }

  static Result<uint32_t> ProjectIdOf(const std::string& path) {
    UniqueFd dir = OpenDirNoFollow(path);
    if (!dir) {
      if (errno == ENOENT) return MakeError(ErrorCode::kNotFound, "no layer at " + path);
      return SystemError("open " + path, errno);
    }
    fsxattr attr{};
    if (::ioctl(dir.get(), FS_IOC_FSGETXATTR, &attr) != 0) return SystemError("FS_IOC_FSGETXATTR", errno);
    return attr.fsx_projid;
  }

  Status SetProjectLimit(uint32_t project, int64_t disk_mb) {
    fs_disk_quota quota{};
    quota.d_version = FS_DQUOT_VERSION;
    quota.d_flags = FS_PROJ_QUOTA;
    quota.d_id = project;
    quota.d_fieldmask = FS_DQ_BSOFT | FS_DQ_BHARD | FS_DQ_ISOFT | FS_DQ_IHARD;
    if (disk_mb > 0) {
      quota.d_blk_hardlimit = static_cast<uint64_t>(disk_mb) * 1024 * 1024 / 512;
      quota.d_ino_hardlimit = InodeLimitFor(disk_mb);
    }
    return Quotactl(Q_XSETQLIM, project, &quota);
  }

  // quotactl_fd(2) on the mount; the older path-based quotactl on kernels before 5.14.
  Status Quotactl(int subcmd, uint32_t project, fs_disk_quota* quota) const {
    int cmd = QCMD(subcmd, PRJQUOTA);
    long rc = ::syscall(SYS_quotactl_fd, mount_fd_.get(), cmd, project, quota);
    if (rc != 0 && errno == ENOSYS) {
      rc = ::quotactl(cmd, block_device_.c_str(), static_cast<int>(project), reinterpret_cast<caddr_t>(quota));
    }
    if (rc != 0) return SystemError("quotactl project " + std::to_string(project), errno);
    return {};
  }

  std::string mount_point_;
  std::string block_device_;
  UniqueFd mount_fd_;
  std::mutex mu_;  // guards the project id counter
};

}  // namespace

Result<std::unique_ptr<LayerArea>> OpenXfsLayerArea(const std::string& mount_point,
                                                    const std::string& block_device) {
  UniqueFd mount_fd = OpenDirNoFollow(mount_point);
  if (!mount_fd) return SystemError("open " + mount_point, errno);
  auto area = std::make_unique<XfsLayerArea>(mount_point, block_device, std::move(mount_fd));
  BH_TRY(area->Init());
  return std::unique_ptr<LayerArea>(std::move(area));
}

}  // namespace bulkhead::storage
