#include "runtime/gvisor/launch.h"

#include <sched.h>
#include <sys/resource.h>

#include <cerrno>

#include "runtime/child_syscalls.h"

namespace bulkhead::runtime::gvisor {
namespace {

void CheckRoot(LaunchPlan* plan) {
  int root = child::Open(plan->root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  STEP(root >= 0, "open the sandbox root");
  for (const std::string& name : plan->top_level_names)
    STEP(child::RealDirOrAbsent(root, name.c_str()), child::kRootMountPointStep);
  if (::mkdirat(root, "tmp", 0700) == 0) {
    STEP(::fchownat(root, "tmp", plan->root_owner, plan->root_owner, AT_SYMLINK_NOFOLLOW) == 0 &&
             ::fchmodat(root, "tmp", 01777, 0) == 0,
         "make /tmp");
  } else {
    STEP(errno == EEXIST, "make /tmp");
  }
  // (tmp was checked to be a real directory above, and nothing of the sandbox runs yet.)
  int keep = static_cast<int>(::syscall(SYS_openat, root, kTmpKeeper, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444));
  STEP(keep >= 0 || errno == EEXIST, "keep /tmp");
  if (keep >= 0) {
    STEP(::fchown(keep, plan->root_owner, plan->root_owner) == 0, "keep /tmp");
    child::Close(keep);
  }
  child::Close(root);
  for (size_t i = 0; i < plan->volume_points.size(); i++) {
    const LaunchPlan::MountPoint& point = plan->volume_points[i];
    plan->failed_volume = static_cast<int>(i);
    int fd = child::OpenMountPoint(point.base.c_str(), point.components, point.create, plan->root_owner);
    STEP(fd >= 0, child::kVolumeMountPointStep);
    child::Close(fd);
  }
  plan->failed_volume = -1;
}

void ExecRunsc(LaunchPlan* plan) {
  int null_fd = child::Open("/dev/null", O_RDONLY | O_CLOEXEC);
  STEP(null_fd >= 0, "open /dev/null");
  STEP(child::Dup3(null_fd, 0, 0) == 0, "stdin");
  STEP(child::Dup3(plan->log_fd, 1, 0) == 1 && child::Dup3(plan->log_fd, 2, 0) == 2, "stdout");
  // Each directory gVisor's kernel keeps open or watched for the sandbox holds a host
  // descriptor of the Sentry's; at the daemon's limit (often 20000 or 65536), a watcher of a
  // large tree would leave the Sentry none for the daemon's next connection to init. 1M like
  // the native tier's init, or as much as the daemon's hard limit allows; the kernel memory
  // they take is charged to the sandbox's memory cgroup.
  struct rlimit nofile = {1 << 20, 1 << 20};
  if (child::SetRlimit(RLIMIT_NOFILE, &nofile) != 0) {
    STEP(child::GetRlimit(RLIMIT_NOFILE, &nofile) == 0, "get rlimit nofile");
    nofile.rlim_cur = nofile.rlim_max;
    STEP(child::SetRlimit(RLIMIT_NOFILE, &nofile) == 0, "rlimit nofile");
  }
  // Nothing of the daemon's reaches runsc (its descriptors are close-on-exec anyway).
  STEP(::syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) == 0, "close_range");
  child::UnblockSignals();
  ::syscall(SYS_execve, plan->argv[0], plan->argv.data(), plan->envp.data());
  child::Fail(plan, "exec runsc");
}

}  // namespace

int LaunchMain(void* arg) {
  auto* plan = static_cast<LaunchPlan*>(arg);
  child::ResetSignalHandlers();
  ::syscall(SYS_umask, 022);
  // The sandbox's cgroups first: runsc's gofer and sandbox processes inherit them.
  for (int fd : plan->cgroup_join_fds) STEP(child::Write(fd, "0", 1) == 1, "join cgroup");
  STEP(::unshare(CLONE_NEWNS | CLONE_NEWNET) == 0, "unshare mount and network namespaces");
  STEP(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make mounts private");
  STEP(::mount("tmpfs", kMountPoint, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, plan->tmpfs_options.c_str()) == 0,
       "mount the launch tmpfs");
  for (const MountStep& step : plan->steps) RunMountStep(plan, step);
  CheckRoot(plan);
  STEP(child::LoopbackUp(), "bring lo up");
  ExecRunsc(plan);
  return 127;
}

}  // namespace bulkhead::runtime::gvisor
