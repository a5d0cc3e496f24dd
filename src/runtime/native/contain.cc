#include "runtime/native/contain.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/ctl_protocol.h"
#include "common/proc_masks.h"
#include "common/sandbox_caps.h"
#include "runtime/child_syscalls.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

namespace bulkhead::runtime::native {
namespace {

// Paths below the sandbox root, in the order RootPaths() returns them.
enum PathIndex {
  kProc, kDev, kDevPts, kDevShm, kSys, kSysFirmware, kSysCgroup, kSysPowercap,
  kNull, kZero, kFull, kRandom, kUrandom, kTty,
  kFd, kStdin, kStdout, kStderr, kPtmx,
  kMaskFirst,  // files hidden behind /dev/null, then dirs hidden behind an empty tmpfs
  kProcKcore = kMaskFirst, kProcKeys, kProcTimerList, kProcSchedDebug, kProcLatency, kProcTimerStats,
  kProcAcpi, kProcScsi, kProcAsound,
  kReadOnlyFirst,  // kernel tunables: visible, read-only
  kProcSys = kReadOnlyFirst, kProcSysrq, kProcIrq, kProcBus, kProcFs,
  kReadOnlyEnd,
  kProcBootId = kReadOnlyEnd,
  kPathCount,
};
constexpr const char* kRelative[kPathCount] = {
    "/proc", "/dev", "/dev/pts", "/dev/shm", "/sys", "/sys/firmware", "/sys/fs/cgroup",
    "/sys/devices/virtual/powercap",
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
    "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/ptmx",
    "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
    "/proc/timer_stats", "/proc/acpi", "/proc/scsi", "/proc/asound",
    "/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs",
    "/proc/sys/kernel/random/boot_id",
};

// The masks of common/proc_masks.h, in kRelative's order.
constexpr bool ProcListsMatch() {
  for (int i = kMaskFirst; i < kReadOnlyFirst; i++)
    if (kMaskedProcPaths[i - kMaskFirst] != kRelative[i]) return false;
  for (int i = kReadOnlyFirst; i < kReadOnlyEnd; i++)
    if (kReadOnlyProcPaths[i - kReadOnlyFirst] != kRelative[i]) return false;
  return std::size(kMaskedProcPaths) == kReadOnlyFirst - kMaskFirst &&
         std::size(kReadOnlyProcPaths) == kReadOnlyEnd - kReadOnlyFirst;
}
static_assert(ProcListsMatch(), "kRelative's /proc masks must be common/proc_masks.h's");

struct Device {
  PathIndex path;
  unsigned major, minor;
};
constexpr Device kDevices[] = {{kNull, 1, 3}, {kZero, 1, 5}, {kFull, 1, 7},
                               {kRandom, 1, 8}, {kUrandom, 1, 9}, {kTty, 5, 0}};
struct Link {
  PathIndex path;
  const char* target;
};
constexpr Link kLinks[] = {{kFd, "/proc/self/fd"}, {kStdin, "/proc/self/fd/0"},
                           {kStdout, "/proc/self/fd/1"}, {kStderr, "/proc/self/fd/2"},
                           {kPtmx, "pts/ptmx"}};

const char* At(const ChildPlan* plan, PathIndex i) { return plan->root_paths[i].c_str(); }

using child::Close;
using child::Dup3;
using child::GetRlimit;
using child::Open;
using child::Prctl;
using child::SetRlimit;
using child::Write;

bool IsDir(const char* path) {
  struct stat st;
  return ::syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const char* path) { return ::syscall(SYS_faccessat, AT_FDCWD, path, F_OK) == 0; }

void MakeDir(ChildPlan* plan, const char* path, const char* step) {
  STEP(::mkdir(path, 0755) == 0 || errno == EEXIST, step);
}

// A detached clone of `source` (child::CloneTree).
int CloneMount(ChildPlan* plan, const char* source, bool recursive, bool writable, int idmap) {
  const char* step = nullptr;
  int fd = child::CloneTree(source, recursive, writable, idmap, &step);
  STEP(fd >= 0, step);
  return fd;
}

// Attaches a read-only clone of `source` at `target` (see CloneMount).
void BindClone(ChildPlan* plan, const char* source, const char* target, bool recursive, int idmap) {
  int fd = CloneMount(plan, source, recursive, /*writable=*/false, idmap);
  STEP(::syscall(SYS_move_mount, fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) == 0, "move_mount");
  Close(fd);
}

// The directory at root + components, made where missing (child::OpenMountPoint).
int OpenVolumeMountPoint(ChildPlan* plan, const VolumePlan& volume) {
  int dir = child::OpenMountPoint(plan->root.c_str(), volume.components, true, plan->root_owner);
  STEP(dir >= 0, child::kVolumeMountPointStep);
  return dir;
}

void BindReadOnly(ChildPlan* plan, const char* source, const char* target) {
  STEP(::mount(source, target, nullptr, MS_BIND | MS_REC, nullptr) == 0, "bind read-only path");
  STEP(::mount(nullptr, target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
               nullptr) == 0,
       "remount read-only path");
}

// Hides a dir behind the scratch tmpfs's empty one (MountScratch).
void EmptyReadOnlyDir(ChildPlan* plan, const char* path) { BindReadOnly(plan, plan->scratch_empty.c_str(), path); }

// --- the steps ---------------------------------------------------------------------

void JoinCgroups(ChildPlan* plan) {
  for (int fd : plan->cgroup_join_fds) STEP(Write(fd, "0", 1) == 1, "join cgroup");
  // The sandbox's group is the root of what its processes see (cgroup.h).
  STEP(::unshare(CLONE_NEWCGROUP) == 0, "unshare cgroup namespace");
  if (plan->cgroup_init_fd >= 0) STEP(Write(plan->cgroup_init_fd, "0", 1) == 1, "join init's cgroup");
  // A time namespace for the sandbox's processes where the kernel has one.
  if (::unshare(CLONE_NEWTIME) != 0) STEP(errno == EINVAL, "unshare time namespace");
  // OOM score 0 for init and so for everything it starts, whatever the daemon's own (a unit's
  // OOMScoreAdjust). Written with CAP_SYS_RESOURCE, 0 also becomes the floor the sandbox's
  // processes cannot go below, so none can shelter from the host's OOM killer. Init's
  // protection from its own sandbox's OOM is a memory group of its own (cgroup.h), not a score.
  int fd = Open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!Write(fd, "0", 1);
    Close(fd);
  }
}

// Every mount the next steps make lies below a top-level name of the sandbox's root: a host
// bind (/usr, /lib...), /proc, /dev, /sys (what is deeper sits on the fresh filesystems mounted
// there). The root's files are the sandbox's own — its writable layer kept across a stop, or a
// snapshot imported from elsewhere — so a symlink planted at one of those names would send a
// mount outside the root. Each must be a real directory, or absent (then made by mkdir, which
// never follows a symlink). Nothing of the sandbox runs yet, so it cannot change in between.
void RequireRealTopLevelDirs(ChildPlan* plan) {
  int root = Open(plan->root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  STEP(root >= 0, "open sandbox root");
  for (const std::string& name : plan->top_level_names) STEP(child::RealDirOrAbsent(root, name.c_str()), child::kRootMountPointStep);
  Close(root);
}

void MountRoot(ChildPlan* plan) {
  STEP(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make mounts private");
  // The image's files are stored owned by the stored range: shown with the sandbox's own ids.
  BindClone(plan, plan->image.c_str(), plan->lower.c_str(), false, plan->stored_ids_fd);
  const char* layers[3] = {plan->lower.c_str(), plan->upper.c_str(), plan->work.c_str()};
  for (int i = 0; i < 3; i++) {
    int fd = Open(layers[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
    STEP(fd >= 0 && Dup3(fd, plan->layer_fds[i], O_CLOEXEC) == plan->layer_fds[i], "open layer");
    Close(fd);
  }
  if (!plan->host_image.empty()) {
    BindClone(plan, plan->host_image.c_str(), plan->host_image_lower.c_str(), false, plan->stored_ids_fd);
    int fd = Open(plan->host_image_lower.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    STEP(fd >= 0 && Dup3(fd, plan->host_image_fd, O_CLOEXEC) == plan->host_image_fd, "open host image layer");
    Close(fd);
  }
  STEP(::mount("overlay", plan->root.c_str(), "overlay", MS_NOSUID | MS_NODEV, plan->overlay_options.c_str()) == 0,
       "mount overlay");
  RequireRealTopLevelDirs(plan);
  // The idmapped lower stays attached until the old root is detached in PivotRoot (one
  // unmount, one RCU grace period, instead of two).
  for (size_t i = 0; i < plan->host_binds.size(); i++) {
    MakeDir(plan, plan->host_bind_targets[i].c_str(), "mkdir host bind target");
    // Not idmapped: host root's files show as nobody's, so sandbox root has no owner rights
    // over them (a root-only file under /usr stays unreadable); the world-readable rest works.
    // An overlay's lower layers are read the same way, with the sandbox root's credentials.
    if (plan->host_bind_overlays[i].empty()) {
      BindClone(plan, plan->host_binds[i].c_str(), plan->host_bind_targets[i].c_str(), true, -1);
    } else {
      STEP(::mount("overlay", plan->host_bind_targets[i].c_str(), "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV,
                   plan->host_bind_overlays[i].c_str()) == 0,
           "mount host overlay");
    }
  }
}

// Named volumes, idmapped from the stored range: what one sandbox's uid 1000 writes is stored
// as kStoredIdBase + 1000 and shows as 1000 in every other sandbox that mounts the volume.
void MountVolumes(ChildPlan* plan) {
  for (size_t i = 0; i < plan->volumes.size(); i++) {
    const VolumePlan& volume = plan->volumes[i];
    plan->failed_volume = static_cast<int>(i);
    int target = OpenVolumeMountPoint(plan, volume);
    int fd = CloneMount(plan, volume.source.c_str(), /*recursive=*/false, !volume.read_only, plan->stored_ids_fd);
    STEP(::syscall(SYS_move_mount, fd, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0,
         "move_mount volume");
    Close(fd);
    Close(target);
  }
  plan->failed_volume = -1;
}

// The scratch tmpfs (contain.h): of the sandbox's own, so the mount table names no host path
// (its mount point goes with the old root; what is bound from it stays).
void MountScratch(ChildPlan* plan) {
  STEP(::mount("tmpfs", plan->scratch.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, plan->scratch_options.c_str()) == 0,
       "mount scratch tmpfs");
  MakeDir(plan, plan->scratch_dev.c_str(), "mkdir scratch dev dir");
  STEP(::chown(plan->scratch_dev.c_str(), plan->root_owner, plan->root_owner) == 0, "own scratch dev dir");
  int fd = Open(plan->boot_id_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  STEP(fd >= 0, "create boot id");
  const long size = static_cast<long>(plan->boot_id.size());
  STEP(Write(fd, plan->boot_id.data(), plan->boot_id.size()) == size, "write boot id");
  Close(fd);
  MakeDir(plan, plan->scratch_empty.c_str(), "mkdir scratch empty dir");
  STEP(::chmod(plan->scratch_empty.c_str(), 0555) == 0, "chmod scratch empty dir");
  MakeDir(plan, plan->scratch_cgroup.c_str(), "mkdir scratch cgroup dir");
  STEP(::chmod(plan->scratch_cgroup.c_str(), 0755) == 0, "chmod scratch cgroup dir");
}

void MountProc(ChildPlan* plan) {
  MakeDir(plan, At(plan, kProc), "mkdir /proc");
  STEP(::mount("proc", At(plan, kProc), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0, "mount proc");
  for (int i = kMaskFirst; i < kReadOnlyFirst; i++) {
    const char* p = At(plan, PathIndex(i));
    if (!Exists(p)) continue;
    if (IsDir(p)) {
      EmptyReadOnlyDir(plan, p);
    } else {
      STEP(::mount("/dev/null", p, nullptr, MS_BIND, nullptr) == 0, "mask proc file");
    }
  }
  for (int i = kReadOnlyFirst; i < kReadOnlyEnd; i++) {
    const char* p = At(plan, PathIndex(i));
    if (Exists(p)) BindReadOnly(plan, p, p);
  }
  // This boot's own id: the host's would be every sandbox's, and the same after a restart.
  if (Exists(At(plan, kProcBootId))) BindReadOnly(plan, plan->boot_id_file.c_str(), At(plan, kProcBootId));
}

void MountDev(ChildPlan* plan) {
  MakeDir(plan, At(plan, kDev), "mkdir /dev");
  STEP(::mount(plan->scratch_dev.c_str(), At(plan, kDev), nullptr, MS_BIND, nullptr) == 0, "bind /dev");
  STEP(::mount(nullptr, At(plan, kDev), nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC, nullptr) == 0,
       "remount /dev");
  for (const Device& d : kDevices)
    STEP(::mknod(At(plan, d.path), S_IFCHR | 0666, makedev(d.major, d.minor)) == 0 &&
             ::chmod(At(plan, d.path), 0666) == 0,
         "mknod");
  for (const Link& l : kLinks) STEP(::symlink(l.target, At(plan, l.path)) == 0, "symlink in /dev");
  MakeDir(plan, At(plan, kDevPts), "mkdir /dev/pts");
  STEP(::mount("devpts", At(plan, kDevPts), "devpts", MS_NOSUID | MS_NOEXEC, plan->devpts_options.c_str()) == 0,
       "mount devpts");
  // /dev/shm is a dir of /dev (the scratch tmpfs, sized for both), not a superblock of its own
  // (contain.h): bound over itself to allow what /dev does not (exec).
  MakeDir(plan, At(plan, kDevShm), "mkdir /dev/shm");
  STEP(::chmod(At(plan, kDevShm), 01777) == 0 && ::chown(At(plan, kDevShm), plan->root_owner, plan->root_owner) == 0,
       "own /dev/shm");
  STEP(::mount(At(plan, kDevShm), At(plan, kDevShm), nullptr, MS_BIND, nullptr) == 0, "bind /dev/shm");
  STEP(::mount(nullptr, At(plan, kDevShm), nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, nullptr) == 0,
       "remount /dev/shm");
}

void MountSys(ChildPlan* plan) {
  MakeDir(plan, At(plan, kSys), "mkdir /sys");
  if (plan->sysfs_fd >= 0) {
    // Every sandbox's (contain.h): a clone of it, which keeps its read-only and other flags.
    int fd = static_cast<int>(
        ::syscall(SYS_open_tree, plan->sysfs_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
    STEP(fd >= 0, "open_tree sysfs");
    STEP(::syscall(SYS_move_mount, fd, "", AT_FDCWD, At(plan, kSys), MOVE_MOUNT_F_EMPTY_PATH) == 0,
         "move_mount sysfs");
    Close(fd);
  } else {
    STEP(::mount("sysfs", At(plan, kSys), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0,
         "mount sysfs");
  }
  EmptyReadOnlyDir(plan, At(plan, kSysFirmware));
  if (Exists(At(plan, kSysPowercap))) EmptyReadOnlyDir(plan, At(plan, kSysPowercap));
  // The sandbox's own cgroup (the cgroup namespace makes it the root), read-only.
  if (plan->v2_cgroups) {
    STEP(::mount("cgroup2", At(plan, kSysCgroup), "cgroup2", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                 nullptr) == 0,
         "mount cgroup2");
  } else {
    STEP(::mount(plan->scratch_cgroup.c_str(), At(plan, kSysCgroup), nullptr, MS_BIND, nullptr) == 0,
         "bind cgroup dir");
    for (size_t i = 0; i < plan->cgroup_v1_sources.size(); i++) {
      MakeDir(plan, plan->cgroup_v1_targets[i].c_str(), "mkdir cgroup controller");
      BindReadOnly(plan, plan->cgroup_v1_sources[i].c_str(), plan->cgroup_v1_targets[i].c_str());
    }
    STEP(::mount(nullptr, At(plan, kSysCgroup), nullptr,
                 MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0,
         "cgroup dir read-only");
  }
}

void SetupNetwork(ChildPlan* plan) {
  // Network mode "none": the new network namespace with only loopback, brought up.
  STEP(child::LoopbackUp(), "bring lo up");
  STEP(::sethostname("sandbox", 7) == 0, "sethostname");
}

void PivotRoot(ChildPlan* plan) {
  STEP(::chdir(plan->root.c_str()) == 0, "chdir root");
  // pivot_root(".", "."): the old root ends up stacked under the new one; detach it.
  STEP(::syscall(SYS_pivot_root, ".", ".") == 0, "pivot_root");
  STEP(::umount2(".", MNT_DETACH) == 0, "detach old root");
  STEP(::chdir("/") == 0, "chdir /");
}

void EnterUserNamespace(ChildPlan* plan) {
  STEP(::setns(plan->userns_fd, CLONE_NEWUSER) == 0, "setns user");
  STEP(::setgroups(0, nullptr) == 0, "setgroups");
  STEP(::setresgid(0, 0, 0) == 0, "setresgid");
  STEP(::setresuid(0, 0, 0) == 0, "setresuid");
}

void SetRlimits(ChildPlan* plan) {
  // Open files: 1M like Docker, or as much as the daemon's own hard limit allows (raising
  // it needs CAP_SYS_RESOURCE).
  struct rlimit nofile = {1048576, 1048576}, core = {0, 0};
  struct rlimit nproc = {rlim_t(plan->pids), rlim_t(plan->pids)};
  if (SetRlimit(RLIMIT_NOFILE, &nofile) != 0) {
    STEP(GetRlimit(RLIMIT_NOFILE, &nofile) == 0, "get rlimit nofile");
    nofile.rlim_cur = nofile.rlim_max;
    STEP(SetRlimit(RLIMIT_NOFILE, &nofile) == 0, "rlimit nofile");
  }
  STEP(SetRlimit(RLIMIT_CORE, &core) == 0, "rlimit core");
  // uids are per-sandbox on the host, so the per-user process limit is per-sandbox too.
  STEP(SetRlimit(RLIMIT_NPROC, &nproc) == 0, "rlimit nproc");
}

void DropCapabilities(ChildPlan* plan) {
  const uint64_t keep = SandboxCapMask();
  for (int c = 0; c <= 63; c++) {
    if (keep & (1ull << c)) continue;
    if (Prctl(PR_CAPBSET_DROP, c) != 0) STEP(errno == EINVAL, "drop bounding cap");
  }
  STEP(::syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0, "clear ambient caps");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; i++) {
    data[i].effective = data[i].permitted = static_cast<uint32_t>(keep >> (32 * i));
    data[i].inheritable = 0;
  }
  STEP(::syscall(SYS_capset, &hdr, data) == 0, "capset");
}

void LockDown(ChildPlan* plan) {
  STEP(Prctl(PR_SET_NO_NEW_PRIVS, 1) == 0, "no_new_privs");
  STEP(::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &plan->seccomp) == 0, "seccomp");
}

void ExecInit(ChildPlan* plan) {
  int null_fd = Open("/dev/null", O_RDWR | O_CLOEXEC);
  STEP(null_fd >= 0, "open /dev/null");
  for (int fd = 0; fd <= 2; fd++) STEP(Dup3(null_fd, fd, 0) == fd, "stdio");
  STEP(Dup3(plan->listen_fd, ctl::kListenFd, 0) == ctl::kListenFd, "listen fd");
  STEP(Dup3(plan->workload_cgroup_fd, ctl::kWorkloadCgroupFd, 0) == ctl::kWorkloadCgroupFd, "workload cgroup fd");
  // Nothing but 0-4 reaches init; the memfd closes itself on exec.
  STEP(::syscall(SYS_close_range, ctl::kWorkloadCgroupFd + 1, ~0U, CLOSE_RANGE_CLOEXEC) == 0, "close_range");
  child::UnblockSignals();
  char arg0[] = "bulkhead-init";
  char* argv[] = {arg0, nullptr};
  char* envp[] = {nullptr};
  ::syscall(SYS_execveat, plan->init_memfd, "", argv, envp, AT_EMPTY_PATH);
  child::Fail(plan, "exec init");
}

}  // namespace

std::vector<std::string> RootPaths(const std::string& root) {
  std::vector<std::string> out;
  for (const char* rel : kRelative) out.push_back(root + rel);
  return out;
}

std::vector<std::string> TopLevelNames(const ChildPlan& plan) {
  std::vector<std::string> names;
  auto add = [&](const std::string& path) {
    std::string first = path.substr(plan.root.size() + 1);
    first = first.substr(0, first.find('/'));
    if (std::find(names.begin(), names.end(), first) == names.end()) names.push_back(first);
  };
  for (const std::string& target : plan.host_bind_targets) add(target);
  for (PathIndex i : {kProc, kDev, kSys}) add(plan.root_paths[i]);
  for (const std::string& target : plan.cgroup_v1_targets) add(target);
  return names;
}

int ChildMain(void* arg) {
  auto* plan = static_cast<ChildPlan*>(arg);
  child::ResetSignalHandlers();
  // The daemon's umask (077) is for its own files; the sandbox's start with the usual one.
  ::syscall(SYS_umask, 022);

  // As the host's root, inside fresh mount/pid/net/uts/ipc namespaces:
  JoinCgroups(plan);
  MountRoot(plan);
  MountVolumes(plan);
  MountScratch(plan);
  MountProc(plan);
  MountDev(plan);
  MountSys(plan);
  SetupNetwork(plan);
  PivotRoot(plan);
  // From here on, the sandbox's root, which is nobody on the host:
  EnterUserNamespace(plan);
  SetRlimits(plan);
  DropCapabilities(plan);
  LockDown(plan);
  ExecInit(plan);
  return 127;
}

}  // namespace bulkhead::runtime::native
