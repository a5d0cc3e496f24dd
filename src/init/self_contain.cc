#include "init/self_contain.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/ctl_protocol.h"
#include "common/proc_masks.h"
#include "common/read_file.h"
#include "common/sandbox_caps.h"
#include "common/unique_fd.h"
#include "init/memory_guard.h"
#include "init/mount_steps.h"

namespace bulkhead::init {
namespace {

// The cgroup hierarchies init mounts for the sandbox, and where it shows them read-only.
constexpr const char* kControllers[] = {"memory", "pids", "cpu", "cpuacct"};
constexpr char kCgroupView[] = "/sys/fs/cgroup";

// Directories of the writable hierarchies, once init contained itself (kept open: their
// mounts are hidden). Each knob is opened anew for each change: gVisor's cgroupfs takes one
// write per open file.
struct Groups {
  UniqueFd memory;    // the memory hierarchy's root: the sandbox's limit as programs read it
  UniqueFd cpu;       // the cpu hierarchy's root: its quota
  UniqueFd pids;      // the pids hierarchy's sandbox group: its limit, over every command's
  // A guest kernel of the sandbox's own (microvm): its memory and CPUs are the VM's size and
  // the host's cgroup around the VMM; a real kernel refuses limits on its root groups anyway.
  bool whole_kernel = false;
  // The pids hierarchy has the freezer too (a guest kernel's: gVisor has none), so the
  // sandbox's group there stops the workload (FreezeWorkload).
  bool freezer = false;
} groups;

// Puts `fd` at number `at` (not close-on-exec: main.cc sets that as for the native tier's).
Status MoveTo(int fd, int at) {
  if (fd == at) return {};
  if (::dup3(fd, at, 0) != at) return SystemError("dup3", errno);
  ::close(fd);
  return {};
}

// Step 1: the control directory as fd 3, where init dials the daemon (ctl::kDaemonSocketName).
Status KeepControlDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY);
  if (fd < 0) return SystemError("open " + dir, errno);
  return MoveTo(fd, ctl::kListenFd);
}

Status WriteKnob(int dir, const char* name, const std::string& value) {
  UniqueFd knob(::openat(dir, name, O_WRONLY | O_CLOEXEC));
  if (!knob) return SystemError(std::string("open ") + name, errno);
  if (::write(knob.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return SystemError(std::string("set ") + name, errno);
  return {};
}

Result<UniqueFd> OpenDir(const std::string& path) {
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return SystemError("open " + path, errno);
  return dir;
}

// Steps 2 and 3: the hierarchies under <dir> (covered by a tmpfs of init's), the workload
// group, the limits, and the read-only view at /sys/fs/cgroup.
Status MakeGroups(const std::string& dir, const ctl::LimitsMessage& limits, bool whole_kernel) {
  BH_TRY(Mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0700"));
  bool freezer = false;
  for (const char* controller : kControllers) {
    const std::string path = dir + "/" + controller;
    BH_TRY(MakeDir(path, 0755));
    // A guest kernel's freezer shares the pids hierarchy: its workload group is the one every
    // command joins already.
    const bool with_freezer = whole_kernel && std::string_view(controller) == "pids";
    if (with_freezer && ::mount("none", path.c_str(), "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "pids,freezer") == 0) {
      freezer = true;
      continue;
    }
    BH_TRY(Mount("none", path, "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, controller));
  }
  // The sandbox's pids group (its limit) holds the workload's (every command): shown as the
  // root of /sys/fs/cgroup/pids as the native tier shows its sandbox group. init stays out.
  const std::string sandbox = dir + "/pids/sandbox", workload = sandbox + "/workload";
  BH_TRY(MakeDir(sandbox, 0755));
  BH_TRY(MakeDir(workload, 0755));
  // fd 4 first: a descriptor opened before could take that number and be replaced.
  int procs = ::open((workload + "/cgroup.procs").c_str(), O_WRONLY);
  if (procs < 0) return SystemError("open cgroup.procs", errno);
  BH_TRY(MoveTo(procs, ctl::kWorkloadCgroupFd));
  auto memory = OpenDir(dir + "/memory");
  if (!memory) return memory.error();
  auto cpu = OpenDir(dir + "/cpu");
  if (!cpu) return cpu.error();
  auto pids = OpenDir(sandbox);
  if (!pids) return pids.error();
  groups = {std::move(*memory), std::move(*cpu), std::move(*pids), whole_kernel, freezer};
  BH_TRY(SetLimits(limits));

  BH_TRY(Mount("tmpfs", kCgroupView, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0755"));
  for (const char* controller : kControllers) {
    const std::string view = std::string(kCgroupView) + "/" + controller;
    BH_TRY(MakeDir(view, 0755));
    const std::string shown = dir + "/" + controller + (std::string(controller) == "pids" ? "/sandbox" : "");
    BH_TRY(Mount(shown, view, nullptr, MS_BIND, nullptr));
    BH_TRY(Mount("", view, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  }
  return Mount("", kCgroupView, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0755");
}

Status Hide(const std::string& dir) {
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0") != 0)
    return SystemError("hide " + dir, errno);
  return {};
}

// /proc as the native tier has it (common/proc_masks.h). gVisor's /proc lacks most of the
// masked ones; what it has is hidden, and its tunables are made read-only.
Status MaskProc() {
  for (std::string_view path : kMaskedProcPaths) {
    const std::string target(path);
    struct stat st;
    if (::stat(target.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      BH_TRY(Mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555"));
    } else {
      BH_TRY(Mount("/dev/null", target, nullptr, MS_BIND, nullptr));
    }
  }
  for (std::string_view path : kReadOnlyProcPaths) {
    const std::string target(path);
    if (::access(target.c_str(), F_OK) != 0) continue;
    BH_TRY(Mount(target, target, nullptr, MS_BIND | MS_REC, nullptr));
    BH_TRY(Mount("", target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  }
  return {};
}

// Best effort: what is not there is already gone.
void TrimDev() {
  ::unlink("/dev/fuse");
  ::unlink("/dev/net/tun");
  ::rmdir("/dev/net");
  if (DIR* chars = ::opendir("/dev/char")) {
    while (dirent* entry = ::readdir(chars)) {
      if (entry->d_name[0] != '.') ::unlinkat(::dirfd(chars), entry->d_name, 0);
    }
    ::closedir(chars);
    ::rmdir("/dev/char");
  }
}

Status DropPrivileges(std::vector<sock_filter>& program) {
  const uint64_t keep = SandboxCapMask();
  // init alone keeps CAP_SYS_RESOURCE, to raise the RLIMIT_NPROC it passes on (SetLimits):
  // outside the bounding set, so no program it execs gets it back.
  const uint64_t init_keeps = keep | (uint64_t{1} << CAP_SYS_RESOURCE);
  for (int cap = 0; cap <= 63; cap++) {
    if (!(keep & (uint64_t{1} << cap)) && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      return SystemError("drop capability " + std::to_string(cap), errno);
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return SystemError("clear ambient capabilities", errno);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; i++) data[i].effective = data[i].permitted = static_cast<uint32_t>(init_keeps >> (32 * i));
  if (::syscall(SYS_capset, &header, data) != 0) return SystemError("capset", errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return SystemError("no_new_privs", errno);
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return SystemError("seccomp", errno);
  return {};
}

}  // namespace

Result<std::vector<sock_filter>> ReadFilter(const std::string& path) {
  auto filter = ReadSmallFile(path);
  if (!filter || filter->empty() || filter->size() % sizeof(sock_filter) != 0 ||
      filter->size() / sizeof(sock_filter) > BPF_MAXINSNS)
    return MakeError(ErrorCode::kInternal, "no seccomp filter at " + path);
  std::vector<sock_filter> program(filter->size() / sizeof(sock_filter));
  std::memcpy(program.data(), filter->data(), filter->size());
  return program;
}

Status SelfContain(const std::string& dir, const ctl::LimitsMessage& limits) {
  // Read before the directory is covered; loaded last.
  auto filter = ReadFilter(dir + "/seccomp.bpf");
  if (!filter) return filter.error();
  BH_TRY(KeepControlDir(dir));
  return ContainListening(dir, limits, std::move(*filter), /*whole_kernel=*/false);
}

Status ContainListening(const std::string& dir, const ctl::LimitsMessage& limits, std::vector<sock_filter> filter,
                        bool whole_kernel) {
  BH_TRY(MakeGroups(dir, limits, whole_kernel));
  BH_TRY(Hide(dir));
  BH_TRY(MaskProc());
  TrimDev();
  return DropPrivileges(filter);
}

Status SetLimits(const ctl::LimitsMessage& limits) {
  if (!groups.pids) return MakeError(ErrorCode::kInvalid, "the sandbox's limits are its host's, not init's");
  constexpr int64_t kPeriodUs = 100000;
  BH_TRY(WriteKnob(groups.pids.get(), "pids.max", std::to_string(limits.pids)));
  // gVisor's pids cgroup lets a fork storm past its limit now and then; its per-user process
  // count does not, and sandbox root has no capability that passes it. Every command init
  // starts from now on inherits it (as the native tier's get the sandbox's pids).
  const struct rlimit nproc = {static_cast<rlim_t>(limits.pids), static_cast<rlim_t>(limits.pids)};
  if (::setrlimit(RLIMIT_NPROC, &nproc) != 0) return SystemError("set RLIMIT_NPROC", errno);
  if (groups.whole_kernel) return {};
  BH_TRY(WriteKnob(groups.memory.get(), "memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
  SetGuardedMemory(limits.memory_bytes);  // (gVisor's memory.limit_in_bytes is only shown)
  BH_TRY(WriteKnob(groups.cpu.get(), "cpu.cfs_period_us", std::to_string(kPeriodUs)));
  return WriteKnob(groups.cpu.get(), "cpu.cfs_quota_us", std::to_string(std::llround(limits.cpus * kPeriodUs)));
}

Result<bool> FreezeWorkload(bool frozen) {
  if (!groups.freezer) return MakeError(ErrorCode::kInvalid, "the sandbox's kernel has no freezer init holds");
  BH_TRY(WriteKnob(groups.pids.get(), "freezer.state", frozen ? "FROZEN" : "THAWED"));
  if (!frozen) return true;
  // The state reads FREEZING until every process stopped: one in a system call stops as it
  // returns to user space (a virtio-fs request it waits for is answered by then).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    UniqueFd state(::openat(groups.pids.get(), "freezer.state", O_RDONLY | O_CLOEXEC));
    char text[16] = {};
    if (!state || ::read(state.get(), text, sizeof text - 1) < 0) return SystemError("read freezer.state", errno);
    if (std::string_view(text).starts_with("FROZEN")) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ::usleep(1000);
  }
}

}  // namespace bulkhead::init
