#include "runtime/microvm/launch.h"

#include <linux/if_tun.h>
#include <linux/memfd.h>
#include <sched.h>
#include <sys/resource.h>

#include <cerrno>

#include "common/guest_link.h"
#include "runtime/child_syscalls.h"

namespace bulkhead::runtime::microvm {
namespace {

void CheckRootAndBind(HelperPlan* plan) {
  int root = child::Open(plan->root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  STEP(root >= 0, "open the sandbox root");
  for (const std::string& name : plan->top_level_names)
    STEP(child::RealDirOrAbsent(root, name.c_str()), child::kRootMountPointStep);
  child::Close(root);
  for (const HelperPlan::Bind& bind : plan->binds) {
    plan->failed_volume = bind.volume;
    int point = child::OpenMountPoint(plan->root.c_str(), bind.components, bind.create, plan->root_owner);
    STEP(point >= 0, bind.volume >= 0 ? child::kVolumeMountPointStep : "host directory mount point");
    plan->failed_volume = -1;
    if (!bind.source.empty()) {
      const char* failed = nullptr;
      int tree = child::CloneTree(bind.source.c_str(), /*recursive=*/true, /*writable=*/false, -1, &failed);
      STEP(tree >= 0, failed);
      STEP(::syscall(SYS_move_mount, tree, "", point, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0,
           "bind a host directory");
      child::Close(tree);
    }
    child::Close(point);
  }
}

void BecomeSandboxUser(HelperPlan* plan) {
  // No supplementary groups of the daemon's (while setgroups is still allowed).
  STEP(::syscall(SYS_setgroups, 0, nullptr) == 0, "setgroups");
  if (plan->userns_fd >= 0) {
    STEP(::syscall(SYS_setns, plan->userns_fd, CLONE_NEWUSER) == 0, "enter the sandbox's user namespace");
    STEP(::syscall(SYS_setresgid, 0, 0, 0) == 0 && ::syscall(SYS_setresuid, 0, 0, 0) == 0,
         "become the sandbox's root");
  } else if (plan->run_uid != 0) {
    STEP(::syscall(SYS_setresgid, plan->run_uid, plan->run_uid, plan->run_uid) == 0 &&
             ::syscall(SYS_setresuid, plan->run_uid, plan->run_uid, plan->run_uid) == 0,
         "drop to the sandbox's host uid");
  }
}

// The guest's tap in the new network namespace (QEMU gets it open: it needs no privilege to
// use it). Its address and state are the daemon's (net/netns.h), by network mode.
int MakeTap(HelperPlan* plan) {
  int tap = child::Open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  STEP(tap >= 0, "open /dev/net/tun");
  struct ifreq ifr {};
  for (size_t i = 0; guest_link::kTapName[i] != 0; i++) ifr.ifr_name[i] = guest_link::kTapName[i];
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  STEP(child::Ioctl(tap, TUNSETIFF, &ifr) == 0, "make the guest's tap");
  return tap;
}

// The template's guest memory copied into a memfd above the fds kept for QEMU.
int CopyMemory(HelperPlan* plan) {
  int from = child::Open(plan->memory_copy.c_str(), O_RDONLY | O_CLOEXEC);
  STEP(from >= 0, "open the template's memory");
  int made = static_cast<int>(::syscall(SYS_memfd_create, "guest-memory", MFD_CLOEXEC));
  STEP(made >= 0, "memfd_create");
  int memory = static_cast<int>(::syscall(SYS_fcntl, made, F_DUPFD_CLOEXEC, kMemoryFd + 1));
  STEP(memory >= 0, "move the guest's memory");
  child::Close(made);
  const off_t size = static_cast<off_t>(::syscall(SYS_lseek, from, 0, SEEK_END));
  STEP(size >= 0 && ::syscall(SYS_ftruncate, memory, size) == 0, "size the guest's memory");
  off_t data = 0;
  while (true) {
    data = static_cast<off_t>(::syscall(SYS_lseek, from, data, SEEK_DATA));
    if (data < 0) break;  // ENXIO: no data after it
    const off_t hole = static_cast<off_t>(::syscall(SYS_lseek, from, data, SEEK_HOLE));
    STEP(hole > data, "find the template memory's holes");
    // sendfile: copy_file_range refuses files on two filesystems.
    STEP(::syscall(SYS_lseek, memory, data, SEEK_SET) == data, "seek in the guest's memory");
    off_t in = data;
    while (in < hole) {
      const long copied = ::syscall(SYS_sendfile, memory, from, &in, static_cast<size_t>(hole - in));
      STEP(copied > 0, "copy the template's memory");
    }
    data = hole;
  }
  child::Close(from);
  return memory;
}

}  // namespace

int HelperMain(void* arg) {
  auto* plan = static_cast<HelperPlan*>(arg);
  child::ResetSignalHandlers();
  ::syscall(SYS_umask, 022);
  for (int fd : plan->cgroup_join_fds) STEP(child::Write(fd, "0", 1) == 1, "join cgroup");
  if (plan->private_mounts) {
    STEP(::unshare(CLONE_NEWNS) == 0, "unshare the mount namespace");
    STEP(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make mounts private");
    STEP(::mount("tmpfs", kMountPoint, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, plan->tmpfs_options.c_str()) == 0,
         "mount the helper tmpfs");
    for (const MountStep& step : plan->steps) RunMountStep(plan, step);
    if (!plan->root.empty()) CheckRootAndBind(plan);
  }
  if (plan->new_netns) STEP(::unshare(CLONE_NEWNET) == 0, "unshare the network namespace");
  const int tap = plan->tap ? MakeTap(plan) : -1;
  const int memory = plan->memory_copy.empty() ? -1 : CopyMemory(plan);
  int incoming = -1;
  if (!plan->incoming.empty()) {
    // Above the fds it and the tap go to, so that neither move overwrites the other.
    const int opened = child::Open(plan->incoming.c_str(), O_RDONLY | O_CLOEXEC);
    STEP(opened >= 0, "open the template's saved state");
    incoming = static_cast<int>(::syscall(SYS_fcntl, opened, F_DUPFD_CLOEXEC, kIncomingFd + 1));
    STEP(incoming >= 0, "move the template's saved state");
    child::Close(opened);
  }
  int null_fd = child::Open("/dev/null", O_RDONLY | O_CLOEXEC);
  STEP(null_fd >= 0, "open /dev/null");
  STEP(child::Dup3(null_fd, 0, 0) == 0, "stdin");
  STEP(child::Dup3(plan->log_fd, 1, 0) == 1 && child::Dup3(plan->log_fd, 2, 0) == 2, "stdout");
  BecomeSandboxUser(plan);
  // Nothing of the daemon's reaches the helper (its descriptors are close-on-exec anyway).
  STEP(::syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) == 0, "close_range");
  if (tap >= 0) {
    STEP(tap == kTapFd ? ::syscall(SYS_fcntl, tap, F_SETFD, 0) == 0 : child::Dup3(tap, kTapFd, 0) == kTapFd,
         "keep the tap open");
  }
  if (incoming >= 0) {
    STEP(child::Dup3(incoming, kIncomingFd, 0) == kIncomingFd, "keep the saved state open");
  }
  if (memory >= 0) STEP(child::Dup3(memory, kMemoryFd, 0) == kMemoryFd, "keep the guest's memory open");
  child::UnblockSignals();
  ::syscall(SYS_execve, plan->argv[0], plan->argv.data(), plan->envp.data());
  child::Fail(plan, "exec");
  return 127;
}

}  // namespace bulkhead::runtime::microvm
