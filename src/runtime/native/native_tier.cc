#include "runtime/native/native_tier.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/ctl_protocol.h"
#include "common/random_hex.h"
#include "common/scope_guard.h"
#include "runtime/child_syscalls.h"
#include "runtime/clone_shared.h"
#include "runtime/native/contain.h"
#include "runtime/process.h"
#include "runtime/root_plan.h"
#include "runtime/seccomp.h"
#include "runtime/user_namespace.h"

namespace bulkhead::runtime::native {
namespace {

constexpr size_t kChildStack = 256 * 1024;

// A new boot id: a random UUID in the kernel's form, "8-4-4-4-12" lower-case hex digits and
// a newline.
Result<std::string> NewBootId() {
  auto hex = RandomHex(16);
  if (!hex) return hex.error();
  std::string id = *hex;
  id[12] = '4';                                             // version 4 (random)
  id[16] = "89ab"[static_cast<unsigned char>(id[16]) % 4];  // the RFC 4122 variant
  return id.substr(0, 8) + "-" + id.substr(8, 4) + "-" + id.substr(12, 4) + "-" + id.substr(16, 4) + "-" +
         id.substr(20) + "\n";
}

// Copies the init binary into a sealed, read-only memfd: what runs as PID 1 in a sandbox can
// never be a host file that the sandbox could overwrite through /proc/1/exe.
Result<UniqueFd> SealedInit(const std::string& path) {
  UniqueFd src(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src) return SystemError("open " + path, errno);
  UniqueFd mem(::memfd_create("bulkhead-init", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem) return SystemError("memfd_create", errno);
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(src.get(), buf, sizeof buf);
    if (n < 0) return SystemError("read " + path, errno);
    if (n == 0) break;
    if (::write(mem.get(), buf, n) != n) return SystemError("write memfd", errno);
  }
  if (::fchmod(mem.get(), 0555) != 0) return SystemError("fchmod memfd", errno);
  if (::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return SystemError("seal memfd", errno);
  // Above the numbers the sandbox's first process puts init's descriptors at (0 to
  // ctl::kWorkloadCgroupFd, contain.cc) before it execs this one: a daemon that makes it
  // early has its lowest numbers free.
  UniqueFd high(::fcntl(mem.get(), F_DUPFD_CLOEXEC, ctl::kWorkloadCgroupFd + 1));
  if (!high) return SystemError("dup memfd", errno);
  return high;
}

Result<UniqueFd> ListenOn(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return MakeError(ErrorCode::kInternal, "socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket", errno);
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return SystemError("bind " + path, errno);
  if (::listen(fd.get(), 128) != 0) return SystemError("listen", errno);
  return fd;
}

// One sysfs for every sandbox (contain.h, sysfs_fd; native_tier.h): a detached read-only mount made in a
// network namespace of its own that holds only a loopback. A sysfs mounted in each sandbox
// would be a superblock per sandbox, and the kernel keeps a slot for every superblock in every
// memory cgroup (bench/README.md, density); what a sandbox's own sysfs showed beyond this one
// is its network devices (/sys/class/net), which netlink and /proc/net still show. An empty
// descriptor when the kernel cannot clone a detached mount (before Linux 6.x's open_tree on
// one): each sandbox then mounts its own, as before.
SharedSysfs MakeSharedSysfs() {
  UniqueFd mount, netns;
  std::string failed;
  // A thread of its own: the new network namespace is this thread's alone. The sysfs does not
  // keep it alive (its loopback would go, and with it /sys/class/net/lo): the descriptor does.
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      failed = std::string("unshare: ") + std::strerror(errno);
      return;
    }
    netns.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    UniqueFd context(static_cast<int>(::syscall(SYS_fsopen, "sysfs", FSOPEN_CLOEXEC)));
    if (!context || ::syscall(SYS_fsconfig, context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
      failed = std::string("fsopen: ") + std::strerror(errno);
      return;
    }
    mount.reset(static_cast<int>(::syscall(SYS_fsmount, context.get(), FSMOUNT_CLOEXEC,
                                            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                                MOUNT_ATTR_NOEXEC)));
    if (!mount) failed = std::string("fsmount: ") + std::strerror(errno);
  }).join();
  if (mount) {
    UniqueFd copy(static_cast<int>(
        ::syscall(SYS_open_tree, mount.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
    if (!copy) {
      failed = std::string("clone: ") + std::strerror(errno);
      mount.reset();
    }
  }
  struct stat ns {};
  if (!mount || !netns || ::fstat(netns.get(), &ns) != 0) {
    spdlog::info("native runtime: each sandbox mounts a sysfs of its own (no shared one: {})", failed);
    return {};
  }
  // (The namespace is named, since the daemon holds it for as long as it runs.)
  spdlog::info("native runtime: every sandbox's /sys is one sysfs, of network namespace net:[{}]", ns.st_ino);
  return {std::move(mount), std::move(netns)};
}

}  // namespace

Result<std::unique_ptr<NativeTier>> NativeTier::Create(const std::string& tag, const std::string& init_binary) {
  auto cgroups = Cgroups::Open(tag, /*inits_apart=*/true);
  if (!cgroups) return cgroups.error();
  auto memfd = SealedInit(init_binary);
  if (!memfd) return memfd.error();
  auto filter = BuildSeccompFilter();
  if (!filter) return filter.error();
  return std::unique_ptr<NativeTier>(
      new NativeTier(std::move(*cgroups), std::move(*memfd), std::move(*filter), MakeSharedSysfs()));
}

Capabilities NativeTier::capabilities() const {
  return {.pause = true, .filesystem_snapshot = true, .memory_snapshot = false, .idmapped_volumes = true,
          .pooling = true, .network_egress = true};
}

std::shared_ptr<const InitDialer> NativeTier::Dialer(const std::string& staging) const {
  return UnixSocketDialer(staging + "/ctl.sock");
}

Result<SandboxHandle> NativeTier::Launch(const LaunchSpec& spec) {
  auto userns = CreateUserNamespace(spec.host_uid);
  if (!userns) return userns.error();
  auto stored_ids = CreateUserNamespace(spec.host_uid, kStoredIdBase);
  if (!stored_ids) return stored_ids.error();
  BH_TRY(cgroups_.Create(spec.id, spec.limits));
  ScopeGuard undo_cgroups([&] { (void)cgroups_.Destroy(spec.id); });
  BH_TRY(cgroups_.SetBackground(spec.id, spec.background));
  auto join = cgroups_.OpenJoinFds(spec.id);
  if (!join) return join.error();
  auto listen = ListenOn(spec.staging + "/ctl.sock");
  if (!listen) return listen.error();

  ChildPlan plan;
  plan.image = spec.rootfs.image;
  plan.lower = spec.staging + "/lower";
  plan.root = spec.staging + "/root";
  plan.scratch = spec.staging + "/scratch";
  for (const auto& dir : {plan.lower, plan.root, plan.scratch})
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + dir, errno);
  // Descriptor numbers reserved for the child to open the layers into (and the host image's).
  UniqueFd slots[4];
  for (auto& slot : slots) {
    slot.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!slot) return SystemError("open /dev/null", errno);
  }
  for (int i = 0; i < 3; i++) plan.layer_fds[i] = slots[i].get();
  if (!spec.rootfs.host_image.empty()) {
    plan.host_image = spec.rootfs.host_image;
    plan.host_image_lower = spec.staging + "/hostimage";
    plan.host_image_fd = slots[3].get();
    if (::mkdir(plan.host_image_lower.c_str(), 0700) != 0 && errno != EEXIST)
      return SystemError("mkdir " + plan.host_image_lower, errno);
  }
  plan.upper = spec.rootfs.upper;
  plan.work = spec.rootfs.work;
  auto fd_path = [](int fd) { return "/proc/self/fd/" + std::to_string(fd); };
  plan.overlay_options = "lowerdir=" + fd_path(plan.layer_fds[0]) + ",upperdir=" + fd_path(plan.layer_fds[1]) +
                         ",workdir=" + fd_path(plan.layer_fds[2]);
  for (const auto& dir : spec.rootfs.host_binds) {
    plan.host_binds.push_back(dir);
    plan.host_bind_targets.push_back(plan.root + dir);
    // The image's own files at that mount point (the host image's additions, and below them
    // those of the host image an image was built on) go over the host's, read from the
    // idmapped lowers by descriptor, as the root overlay's layers are.
    std::string lowers;
    if (HasFilesAt(spec.rootfs.image, dir)) lowers += fd_path(plan.layer_fds[0]) + dir + ":";
    if (!plan.host_image.empty() && HasFilesAt(plan.host_image, dir)) lowers += fd_path(plan.host_image_fd) + dir + ":";
    plan.host_bind_overlays.push_back(lowers.empty() ? "" : "lowerdir=" + lowers + dir);
  }
  plan.root_paths = RootPaths(plan.root);
  for (const auto& volume : spec.volumes) {
    VolumePlan v{volume.source, {}, volume.read_only};
    std::istringstream parts(volume.target);
    for (std::string name; std::getline(parts, name, '/');)
      if (!name.empty()) v.components.push_back(name);
    plan.volumes.push_back(std::move(v));
  }
  plan.root_owner = spec.host_uid;
  std::string owner = "uid=" + std::to_string(spec.host_uid) + ",gid=" + std::to_string(spec.host_uid);
  // /dev's nodes and links, and /dev/shm (half the sandbox's memory, as a tmpfs there is).
  plan.scratch_options = "mode=755,size=" + std::to_string(64 + (spec.limits.memory_mb / 2 + 1) * 1024) + "k," + owner;
  plan.devpts_options = "newinstance,ptmxmode=0666,mode=0620,gid=" + std::to_string(spec.host_uid + 5);
  auto boot_id = NewBootId();
  if (!boot_id) return boot_id.error();
  plan.boot_id = std::move(*boot_id);
  plan.boot_id_file = plan.scratch + "/boot_id";
  plan.scratch_dev = plan.scratch + "/dev";
  plan.scratch_empty = plan.scratch + "/empty";
  plan.scratch_cgroup = plan.scratch + "/cgroup";
  plan.userns_fd = userns->get();
  plan.stored_ids_fd = stored_ids->get();
  for (const auto& fd : join->sandbox) plan.cgroup_join_fds.push_back(fd.get());
  plan.cgroup_init_fd = join->init.get();
  plan.listen_fd = listen->get();
  plan.workload_cgroup_fd = join->workload.get();
  plan.init_memfd = init_memfd_.get();
  plan.sysfs_fd = sysfs_.mount.get();
  plan.seccomp.len = static_cast<unsigned short>(seccomp_.size());
  plan.seccomp.filter = seccomp_.data();
  plan.pids = spec.limits.pids;
  plan.v2_cgroups = cgroups_.v2();
  if (!plan.v2_cgroups) {
    for (const auto& dir : cgroups_.Paths(spec.id)) {
      // /sys/fs/cgroup/<controller>/bulkhead-<tag>/<id> -> <root>/sys/fs/cgroup/<controller>
      std::string controller = dir.substr(std::strlen("/sys/fs/cgroup/"));
      controller = controller.substr(0, controller.find('/'));
      plan.cgroup_v1_sources.push_back(dir);
      plan.cgroup_v1_targets.push_back(plan.root + "/sys/fs/cgroup/" + controller);
    }
  }
  plan.top_level_names = TopLevelNames(plan);

  int flags = CLONE_VM | CLONE_VFORK | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | SIGCHLD;
  pid_t pid = CloneOnBorrowedMemory(ChildMain, flags, &plan, kChildStack);
  if (pid < 0) return SystemError("clone sandbox", errno);
  // CLONE_VFORK: we are back when the child exec'd init or gave up.
  if (plan.failed_step) {
    ::waitpid(pid, nullptr, __WALL);
    if (plan.failed_volume >= 0)
      return VolumeMountPointError(spec.volumes[plan.failed_volume], plan.failed_step, plan.failed_errno);
    if (std::strcmp(plan.failed_step, child::kRootMountPointStep) == 0) return UnbootableFiles();
    return SystemError(std::string("sandbox setup failed at ") + plan.failed_step, plan.failed_errno);
  }
  SandboxHandle init = HandleOf(pid);
  BH_TRY(cgroups_.InitStarted(spec.id, spec.limits));
  undo_cgroups.Dismiss();
  return init;
}

Result<NetworkAttachment> NativeTier::AttachNetwork(const SandboxHandle& handle) { return NetworkOf(handle); }

Status NativeTier::SetLimits(const std::string& id, const Limits& limits) { return cgroups_.SetLimits(id, limits); }

Result<Usage> NativeTier::SandboxUsage(const std::string& id) { return cgroups_.Usage(id); }

bool NativeTier::Alive(const SandboxHandle& init) { return HandleAlive(init); }

Status NativeTier::Destroy(const std::string& id, const SandboxHandle& init) {
  UniqueFd pidfd;
  if (Alive(init)) {
    // Killing PID 1 of the sandbox ends every process in its pid namespace.
    pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, init.pid, 0)));
    ::kill(init.pid, SIGKILL);
    // A paused sandbox dies only once thawed; the pending SIGKILL runs before any of its code.
    if (cgroups_.Frozen(id)) (void)cgroups_.SetFrozen(id, false);
  }
  // Init exits last in its namespace, after all the others (a fork bomb's thousands of them
  // can take seconds): once it has, the groups are empty and go at the first rmdir.
  if (pidfd) {
    pollfd p{pidfd.get(), POLLIN, 0};
    ::poll(&p, 1, 5000);
  }
  // Kills what is left (a process in the group but not the namespace) and waits (5 s at most)
  // until no process of the sandbox remains.
  Status destroyed = cgroups_.Destroy(id);
  // Reap init if it is our child (not so after a daemon restart: then the host's init reaps
  // it); otherwise it stays a zombie.
  if (init.pid > 0) ::waitpid(init.pid, nullptr, WNOHANG | __WALL);
  return destroyed;
}

std::vector<std::string> NativeTier::Leftovers() { return cgroups_.List(); }

}  // namespace bulkhead::runtime::native
