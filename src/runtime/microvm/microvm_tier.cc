#include "runtime/microvm/microvm_tier.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/ctl_protocol.h"
#include "common/guest_link.h"
#include "common/id_ranges.h"
#include "common/random_hex.h"
#include "common/read_file.h"
#include "common/scope_guard.h"
#include "runtime/child_syscalls.h"
#include "runtime/clone_shared.h"
#include "runtime/microvm/initramfs.h"
#include "runtime/microvm/launch.h"
#include "runtime/microvm/memory_image.h"
#include "runtime/process.h"
#include "runtime/root_plan.h"
#include "runtime/seccomp.h"
#include "runtime/user_namespace.h"
#include "runtime/vsock_dialer.h"

namespace bulkhead::runtime::microvm {
namespace fs = std::filesystem;
namespace {

// The host CPU's model as /proc/cpuinfo names it: a KVM guest runs on it ("-cpu host").
std::string HostCpuModel() {
  const std::string cpuinfo = ReadSmallFile("/proc/cpuinfo", 1 << 22).value_or("");
  const size_t at = cpuinfo.find("model name");
  if (at == std::string::npos) return "an unnamed CPU";
  const size_t colon = cpuinfo.find(':', at), end = cpuinfo.find('\n', at);
  if (colon == std::string::npos || colon > end) return "an unnamed CPU";
  return cpuinfo.substr(colon + 2 > end ? end : colon + 2, end - std::min(colon + 2, end));
}

constexpr size_t kChildStack = 64 * 1024;
constexpr char kInitramfs[] = "initramfs.cpio";
// Where Launch leaves the way to a guest's vsock device for Dialer: "<vm dir>\n<host uid>\n".
constexpr char kVsockNote[] = "/vsock";
// How long a guest may take from QEMU's start to init serving: ~1.5-4 s under TCG here, well
// under a second with KVM; a loaded host (a test run's parallel boots) takes far longer.
constexpr auto kGuestBoots = std::chrono::seconds(120);
// How long a device daemon may take to make its socket.
constexpr auto kDeviceListens = std::chrono::seconds(20);

Result<pid_t> SpawnHelper(HelperPlan& plan) {
  const pid_t pid = CloneOnBorrowedMemory(HelperMain, CLONE_VM | CLONE_VFORK | SIGCHLD, &plan, kChildStack);
  if (pid < 0) return SystemError("clone a microvm helper", errno);
  if (plan.failed_step) {
    ::waitpid(pid, nullptr, 0);
    if (std::strcmp(plan.failed_step, child::kRootMountPointStep) == 0) return UnbootableFiles();
    return SystemError(std::string("microvm helper failed at ") + plan.failed_step, plan.failed_errno);
  }
  return pid;
}

// The argv/envp vectors a HelperPlan points into.
struct Command {
  std::vector<std::string> args, env;
  void Into(HelperPlan& plan) {
    for (auto& arg : args) plan.argv.push_back(arg.data());
    plan.argv.push_back(nullptr);
    for (auto& var : env) plan.envp.push_back(var.data());
    plan.envp.push_back(nullptr);
  }
};

Result<UniqueFd> OpenLog(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!fd) return SystemError("create " + path, errno);
  return fd;
}

// Whether the child `pid` has exited (reaping it).
bool Exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

// Waits until the daemon `pid` made its socket at `path`.
Status WaitForSocket(const std::string& path, pid_t pid, const std::string& what, const std::string& log) {
  const auto deadline = std::chrono::steady_clock::now() + kDeviceListens;
  for (int attempt = 0;; ++attempt) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return {};
    if (Exited(pid)) return MakeError(ErrorCode::kInternal, what + " did not start: " + ReadLogTail(log));
    if (std::chrono::steady_clock::now() > deadline)
      return MakeError(ErrorCode::kInternal, what + " made no socket in time: " + ReadLogTail(log));
    std::this_thread::sleep_for(std::chrono::microseconds(attempt < 100 ? 500 : 5000));
  }
}

// The listener on which the guest's init says it serves (ctl::kGuestReadyPort): the vsock
// device connects to <uds-path>_<port> for a guest's connection to the host's port.
Result<UniqueFd> ListenForReady(const std::string& path, uid_t host_uid) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return MakeError(ErrorCode::kInternal, "socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return SystemError("bind " + path, errno);
  // The device runs as the sandbox's host uid.
  if (::chown(path.c_str(), host_uid, host_uid) != 0) return SystemError("chown " + path, errno);
  if (::listen(fd.get(), 4) != 0) return SystemError("listen " + path, errno);
  return fd;
}

std::vector<std::string> PathComponents(const std::string& path) {
  std::vector<std::string> parts;
  std::istringstream in(path);
  for (std::string name; std::getline(in, name, '/');)
    if (!name.empty()) parts.push_back(name);
  return parts;
}

// The root virtiofsd's filesystem, as the gvisor tier's launcher assembles its root: the image
// idmapped from the stored ids, under the writable layer; the host image's directories bound
// read-only (merged with the image's own where it has files there); each volume's mount point.
void PlanRoot(const LaunchSpec& spec, HelperPlan& plan) {
  plan.root = PlanRootOverlay(spec.rootfs, kMountPoint, plan.steps);
  plan.top_level_names = {"proc", "dev", "sys"};
  for (size_t i = 0; i < spec.rootfs.host_binds.size(); i++) {
    const std::string& dir = spec.rootfs.host_binds[i];
    plan.top_level_names.push_back(dir.substr(1, dir.find('/', 1) - 1));
    plan.binds.push_back({PlanHostDir(spec.rootfs, dir, i, kMountPoint, plan.steps), PathComponents(dir), true, -1});
  }
  for (size_t i = 0; i < spec.volumes.size(); i++) {
    const std::string& target = spec.volumes[i].target;
    // Below a host directory (read-only) it can only be entered.
    const bool below_host = std::any_of(spec.rootfs.host_binds.begin(), spec.rootfs.host_binds.end(),
                                        [&](const std::string& dir) { return target.rfind(dir + "/", 0) == 0; });
    plan.binds.push_back({"", PathComponents(target), !below_host, static_cast<int>(i)});
  }
}

}  // namespace

MicrovmTier::MicrovmTier(Cgroups cgroups, std::string dir, std::string vms_root, Installed installed,
                         bool templates, bool memory_snapshots)
    : cgroups_(std::move(cgroups)),
      dir_(std::move(dir)),
      vms_root_(std::move(vms_root)),
      installed_(std::move(installed)),
      use_templates_(templates),
      want_memory_snapshots_(memory_snapshots) {
  // The probe boot takes up to ~20 s where KVM hangs guests: the daemon serves meanwhile, and
  // the first microvm launch waits for it.
  accelerator_ = std::async(std::launch::async, [this] {
                   Accelerator chosen = ChooseAccelerator(installed_, dir_ + "/" + kInitramfs, dir_);
                   spdlog::info("microvm runtime: {} ({})", chosen.kvm ? "KVM" : "TCG", chosen.why);
                   return chosen;
                 }).share();
}

MicrovmTier::~MicrovmTier() {
  if (accelerator_.valid()) accelerator_.wait();
}

Result<std::unique_ptr<MicrovmTier>> MicrovmTier::Create(const std::string& tag, const std::string& state_dir,
                                                         const std::string& init_binary, Installed installed,
                                                         bool templates, bool memory_snapshots) {
  auto cgroups = Cgroups::Open(tag + "-microvm", /*inits_apart=*/false);
  if (!cgroups) return cgroups.error();
  BH_TRY(MakeDir(kMountPoint, 0700));
  const std::string dir = state_dir + "/microvm";
  BH_TRY(MakeDir(dir, 0700));
  auto filter = BuildSeccompFilter();
  if (!filter) return filter.error();
  InitramfsFiles files;
  files.init_binary = init_binary;
  files.seccomp_filter.assign(reinterpret_cast<const char*>(filter->data()), filter->size() * sizeof(sock_filter));
  files.modules = installed.modules;
  BH_TRY(WriteInitramfs(dir + "/" + kInitramfs, files));
  // Templates saved by an earlier start may hold another init or kernel: each is built again.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind("template-", 0) == 0) fs::remove_all(entry.path(), ec);
  // One directory of sockets per guest, searchable (not listable) by others: each guest's own is
  // its host uid's alone. A short path: unix socket paths are at most 107 bytes.
  const std::string vms_root = "/run/bulkhead-vms-" + tag;
  BH_TRY(MakeDir(vms_root, 0711));
  if (::chmod(vms_root.c_str(), 0711) != 0) return SystemError("chmod " + vms_root, errno);
  return std::unique_ptr<MicrovmTier>(
      new MicrovmTier(std::move(*cgroups), dir, vms_root, std::move(installed), templates, memory_snapshots));
}

Capabilities MicrovmTier::capabilities() const {
  return {.pause = true, .filesystem_snapshot = true, .memory_snapshot = MemorySnapshots(), .idmapped_volumes = true,
          .pooling = true, .limits_in_sandbox = true, .network_egress = true,
          .nic_from_boot = true, .ports_through_init = true, .freeze_inside = true};
}

std::string MicrovmTier::BootShape(const Limits& limits) const {
  return GuestShape{GuestMemoryMb(limits), VcpusFor(limits)}.Name();
}

std::string MicrovmTier::ProxyHost() const { return guest_link::kGatewayAddress; }

const Accelerator& MicrovmTier::Chosen() const { return accelerator_.get(); }

std::vector<std::pair<std::string, std::string>> MicrovmTier::Details() const {
  std::string accelerator = "probing";
  if (accelerator_.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    accelerator = (Chosen().kvm ? "kvm: " : "tcg: ") + Chosen().why;
  std::string templates;
  for (const auto& [shape, state] : templates_.States())
    templates += (templates.empty() ? "" : ", ") + shape + ": " + state;
  std::string others;
  for (const std::string& vmm : installed_.other_vmms) others += (others.empty() ? "" : ", ") + vmm;
  return {{"qemu", installed_.qemu},
          {"qemu_version", installed_.qemu_version},
          {"guest_kernel", installed_.kernel_version},
          {"virtiofsd", installed_.virtiofsd_version},
          {"vsock_device", "vhost-device-vsock " + installed_.vsock_device_version},
          {"accelerator", accelerator},
          {"templates", !use_templates_  ? "off (--no-microvm-templates)"
                        : templates.empty() ? "none yet (each guest shape's first launch builds one)"
                                            : templates},
          // Detected, not driven: no backend of theirs was run here.
          {"other_vmms", others.empty() ? "none" : others + " (found, not used)"}};
}

std::vector<std::pair<std::string, std::string>> MicrovmTier::SandboxDetails(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = guests_.find(id);
  if (it == guests_.end()) return {};
  return {{"accelerator", Chosen().kvm ? "kvm" : "tcg"},
          {"boot", it->second.restored ? "restored from a template" : "booted"},
          {"vcpus", std::to_string(it->second.vcpus)},
          {"guest_memory_mb", std::to_string(it->second.memory_mb)},
          {"guest_kernel", installed_.kernel_version}};
}

int64_t MicrovmTier::GuestMemoryMb(const Limits& limits) { return std::max(limits.memory_mb, kMinGuestMb); }

int MicrovmTier::VcpusFor(const Limits& limits) {
  const long host = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  return static_cast<int>(std::clamp<long>(std::lround(std::ceil(limits.cpus)), 1, host));
}

Limits MicrovmTier::HostLimits(const Limits& sandbox, bool kvm) {
  Limits host = sandbox;
  // QEMU (~60 MiB resident with shared guest RAM), its TCG translation cache (128 MiB, tb-size)
  // and the device daemons (~10 MiB each).
  host.memory_mb = GuestMemoryMb(sandbox) + 128 + (kvm ? 0 : 192);
  host.pids = 512;  // host threads of QEMU and the daemons: the sandbox's own count is the guest's
  return host;
}

std::shared_ptr<const InitDialer> MicrovmTier::Dialer(const std::string& staging) const {
  // (Launch wrote the note; a sandbox recovered after a restart has it from its boot.)
  std::istringstream note(ReadSmallFile(staging + kVsockNote).value_or(""));
  std::string vm_dir, uid;
  std::getline(note, vm_dir);
  std::getline(note, uid);
  return VsockDeviceDialer(vm_dir + "/v.sock", ctl::kGuestInitPort,
                           static_cast<uid_t>(std::strtoul(uid.c_str(), nullptr, 10)));
}

Result<SandboxHandle> MicrovmTier::Launch(const LaunchSpec& spec) {
  using Clock = std::chrono::steady_clock;
  const auto began = Clock::now();
  const Accelerator& accelerator = Chosen();
  auto stored_ids = CreateUserNamespace(spec.host_uid, kStoredIdBase);
  if (!stored_ids) return stored_ids.error();
  auto own_ids = CreateUserNamespace(spec.host_uid, 0);
  if (!own_ids) return own_ids.error();
  BH_TRY(cgroups_.Create(spec.id, HostLimits(spec.limits, accelerator.kvm)));
  Guest guest{GuestMemoryMb(spec.limits), VcpusFor(spec.limits), {}};
  // Whatever a failed launch made: the processes (all in the cgroups), the VM directory.
  ScopeGuard undo([&] {
    for (pid_t pid : guest.children) ::kill(pid, SIGKILL);
    (void)cgroups_.Destroy(spec.id);
    for (pid_t pid : guest.children) ::waitpid(pid, nullptr, 0);
    std::error_code ec;
    fs::remove_all(VmDir(spec.id), ec);
  });
  BH_TRY(cgroups_.SetBackground(spec.id, spec.background));
  auto join = cgroups_.OpenJoinFds(spec.id);
  if (!join) return join.error();
  std::vector<int> join_fds;
  for (const auto& fd : join->sandbox) join_fds.push_back(fd.get());

  const std::string vm = VmDir(spec.id);
  std::error_code ec;
  fs::remove_all(vm, ec);
  BH_TRY(MakeDir(vm, 0700));
  if (::chown(vm.c_str(), spec.host_uid, spec.host_uid) != 0) return SystemError("chown " + vm, errno);
  const std::string note = vm + "\n" + std::to_string(spec.host_uid) + "\n";
  BH_TRY(WriteWholeFile(spec.staging + kVsockNote, note.data(), note.size(), 0600));
  auto ready = ListenForReady(vm + "/v.sock_" + std::to_string(ctl::kGuestReadyPort), spec.host_uid);
  if (!ready) return ready.error();

  // The file servers: the root, then each volume.
  std::vector<std::string> fs_sockets;
  for (size_t i = 0; i <= spec.volumes.size(); i++) {
    const bool root = i == 0;
    const std::string socket = vm + "/fs" + std::to_string(i) + ".sock";
    const std::string log = spec.staging + "/virtiofsd" + (root ? "" : "-" + VolumeTag(i - 1)) + ".log";
    auto log_fd = OpenLog(log);
    if (!log_fd) return log_fd.error();
    HelperPlan plan;
    plan.cgroup_join_fds = join_fds;
    plan.private_mounts = true;
    plan.tmpfs_options = "mode=0711,size=64k";
    plan.stored_ids_fd = stored_ids->get();
    plan.root_owner = spec.host_uid;
    plan.userns_fd = own_ids->get();
    plan.log_fd = log_fd->get();
    std::string shared_dir;
    Command command;
    if (root) {
      PlanRoot(spec, plan);
      shared_dir = plan.root;
      // The layer changes only through the guest, so what its kernel cached stays true: lookups
      // and attributes are not asked again (under TCG a round trip costs milliseconds: a spawn
      // of /bin/true took 145 ms with --cache=auto, 31 with always). The host image's lower
      // directories are the host's: a host file changed while the guest runs may show late.
      command.args = {installed_.virtiofsd, "--cache=always", "--xattr"};
    } else {
      const VolumeBind& volume = spec.volumes[i - 1];
      shared_dir = std::string(kMountPoint) + "/volume";
      plan.steps.push_back({MountStep::kDir, "", shared_dir});
      plan.steps.push_back({MountStep::kClone, volume.source, shared_dir, "", !volume.read_only, true});
      // A volume is shared with other sandboxes: no caching of what another may change. Extended
      // attributes as on the root (file capabilities: the kernel stores them for the sandbox's
      // user namespace only).
      command.args = {installed_.virtiofsd, "--cache=never", "--xattr"};
      if (volume.read_only) command.args.push_back("--readonly");
    }
    command.args.insert(command.args.end(), {"--socket-path=" + socket, "--shared-dir=" + shared_dir,
                                             "--sandbox=chroot", "--log-level=error"});
    command.Into(plan);
    auto pid = SpawnHelper(plan);
    if (!pid) {
      if (plan.failed_volume >= 0)
        return VolumeMountPointError(spec.volumes[plan.failed_volume], plan.failed_step, plan.failed_errno);
      return pid.error();
    }
    guest.children.push_back(*pid);
    BH_TRY(WaitForSocket(socket, *pid, "virtiofsd", log));
    fs_sockets.push_back(socket);
  }

  // The vsock device.
  const std::string vsock_socket = vm + "/vsock.sock";
  auto vsock_device = StartVsockDevice(spec.id, spec.staging, spec.host_uid, join_fds);
  if (!vsock_device) return vsock_device.error();
  guest.children.push_back(*vsock_device);
  guest.vsock_device = *vsock_device;
  guest.staging = spec.staging;

  // The guest: restored from a memory image; else a copy of its shape's template where one is
  // saved (waited for where memory snapshots need guests to be copies), else a boot.
  const bool from_image = !spec.memory_image.empty();
  ctl::GuestBootMessage boot;
  boot.limits = LimitsInsideFor(spec.limits);
  boot.vsock_port = ctl::kGuestInitPort;
  boot.network = spec.network;
  for (size_t i = 0; i < spec.volumes.size(); i++)
    boot.volumes.push_back({VolumeTag(i), spec.volumes[i].target, spec.volumes[i].read_only});
  const GuestShape shape{guest.memory_mb, guest.vcpus};
  const auto deadline = std::chrono::steady_clock::now() + kGuestBoots;
  // The saved state (its memory beside it: TemplateMemory).
  std::optional<std::string> saved;
  if (!from_image && use_templates_)
    saved = MemorySnapshots() ? templates_.Wait(shape, deadline) : templates_.Ready(shape);
  guest.restored = saved.has_value() || from_image;
  VmConfig config = BaseConfig(shape);
  if (guest.restored) {
    config.boot_port_socket = vm + "/boot.sock";
    config.qmp_socket = vm + "/qmp.sock";
    config.incoming_fd = kIncomingFd;
    config.memory_path = "/proc/self/fd/" + std::to_string(kMemoryFd);
  } else {
    config.command_line = KernelCommandLine("--guest " + ctl::EncodeGuestBootArg(boot), installed_.tsc_khz);
  }
  config.console_log = spec.staging + "/console.log";
  config.virtiofs_sockets = fs_sockets;
  config.vsock_socket = vsock_socket;
  config.run_uid = spec.host_uid;
  if (spec.network) config.tap_fd = kTapFd;
  config.name = "bulkhead-" + spec.id;
  const std::string qemu_log = spec.staging + "/qemu.log";
  ::unlink(config.console_log.c_str());
  pid_t qemu = 0;
  {
    auto log_fd = OpenLog(qemu_log);
    if (!log_fd) return log_fd.error();
    HelperPlan plan;
    plan.cgroup_join_fds = join_fds;
    plan.new_netns = true;
    plan.tap = spec.network;
    if (saved) {
      plan.incoming = *saved;
      plan.memory_copy = TemplateMemory(*saved);
    } else if (from_image) {
      plan.incoming = spec.memory_image + kImageState;
      plan.memory_copy = spec.memory_image + kImageMemory;
    }
    plan.log_fd = log_fd->get();
    Command command;
    command.args = QemuArgs(config);
    command.Into(plan);
    auto pid = SpawnHelper(plan);
    if (!pid) return pid.error();
    qemu = *pid;
    guest.children.push_back(qemu);
    guest.qemu = qemu;
  }
  const SandboxHandle handle = HandleOf(qemu);
  auto failed = [&](const std::string& what) {
    return MakeError(ErrorCode::kInternal, what + ": " + ReadLogTail(config.console_log, 1500) +
                                               " | qemu: " + ReadLogTail(qemu_log, 500));
  };
  UniqueFd boot_port;
  if (from_image) {
    const auto spawned = Clock::now();
    if (Status loaded = LoadMemoryImage(config, qemu, deadline); !loaded.ok())
      return failed("the memory image did not load: " + loaded.error().message);
    const auto loaded = Clock::now();
    if (Status serving = ServeAfterPlug(spec.id, guest, [&] { return !Exited(qemu); }, deadline); !serving.ok())
      return failed(serving.error().message);
    auto ms = [](auto from, auto to) { return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count(); };
    spdlog::info("microvm: {} restored from a memory image: {} ms to QEMU's start (its memory copied), {} ms to load "
                 "its state, init served {} ms later",
                 spec.id, ms(began, spawned), ms(spawned, loaded), ms(loaded, Clock::now()));
  } else if (saved) {
    boot.realtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
    auto entropy = RandomHex(32);
    if (!entropy) return entropy.error();
    boot.entropy = *entropy;
    auto started = StartCopy(config, qemu, ctl::EncodeGuestBootArg(boot), deadline);
    if (!started) return failed("the restored guest did not start: " + started.error().message);
    boot_port = std::move(*started);
  }
  while (!from_image) {
    pollfd p{ready->get(), POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) break;
    if (Exited(qemu)) return failed("the guest stopped before its init served");
    if (std::chrono::steady_clock::now() > deadline) return failed("the guest's init did not serve in time");
  }
  UniqueFd told(from_image ? -1 : ::accept4(ready->get(), nullptr, nullptr, SOCK_CLOEXEC));
  ::unlink((vm + "/v.sock_" + std::to_string(ctl::kGuestReadyPort)).c_str());
  if (!HandleAlive(handle)) return failed("the guest stopped");
  {
    std::lock_guard lock(mu_);
    guests_[spec.id] = std::move(guest);
  }
  undo.Dismiss();
  return handle;
}

Result<pid_t> MicrovmTier::StartVsockDevice(const std::string& id, const std::string& staging, uid_t host_uid,
                                            const std::vector<int>& join_fds) {
  const std::string vm = VmDir(id), socket = vm + "/vsock.sock", log = staging + "/vsock.log";
  auto log_fd = OpenLog(log);
  if (!log_fd) return log_fd.error();
  HelperPlan plan;
  plan.cgroup_join_fds = join_fds;
  plan.run_uid = host_uid;
  plan.log_fd = log_fd->get();
  Command command;
  command.args = {installed_.vsock_device, "--vm", "guest-cid=3,socket=" + socket + ",uds-path=" + vm + "/v.sock"};
  command.env = {"RUST_LOG=error"};
  command.Into(plan);
  auto pid = SpawnHelper(plan);
  if (!pid) return pid.error();
  if (Status listening = WaitForSocket(socket, *pid, "vhost-device-vsock", log); !listening.ok()) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    return listening.error();
  }
  return *pid;
}

Status MicrovmTier::RestartVsockDevice(const std::string& id, Guest& guest) {
  // A guest re-attached after a restart: its device daemon is found in its cgroup.
  pid_t old = guest.vsock_device;
  std::vector<std::string> paths = cgroups_.Paths(id);
  if (old == 0 && !paths.empty()) {
    std::istringstream procs(ReadSmallFile(paths.front() + "/cgroup.procs", 1 << 20).value_or(""));
    for (pid_t pid = 0; procs >> pid;) {
      std::error_code ec;
      if (fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec) == installed_.vsock_device) old = pid;
    }
  }
  // Its host uid is the VM directory's (Launch).
  struct stat vm {};
  if (::stat(VmDir(id).c_str(), &vm) != 0) return SystemError("stat " + VmDir(id), errno);
  auto join = cgroups_.OpenJoinFds(id);
  if (!join) return join.error();
  std::vector<int> join_fds;
  for (const auto& fd : join->sandbox) join_fds.push_back(fd.get());
  if (old > 0) {
    ::kill(old, SIGKILL);
    ::waitpid(old, nullptr, 0);  // (ECHILD for a daemon a crashed daemon started)
    std::erase(guest.children, old);
  }
  auto started = StartVsockDevice(id, guest.staging, vm.st_uid, join_fds);
  if (!started) return started.error();
  guest.children.push_back(*started);
  guest.vsock_device = *started;
  return {};
}

// After a vsock device was plugged into a guest restored from a memory image (or whose save
// replaced it): until its init serves. Where it does not within seconds, the device daemon
// may be the one that ended (vsock_dialer.h: a daemon killed while it dialed), or the guest's
// kernel missed the device (a plug lost now and then, seen under a loaded TCG, which the next
// plug mended): a new daemon and a new device, again each time a longer wait ends unanswered.
Status MicrovmTier::ServeAfterPlug(const std::string& id, Guest& guest, const std::function<bool()>& alive,
                                   std::chrono::steady_clock::time_point deadline) {
  const std::string vm = VmDir(id);
  auto wait = std::chrono::seconds(4);
  for (int plugs = 1;; plugs++, wait += std::chrono::seconds(2)) {
    Status served = WaitForGuestPort(vm + "/v.sock", ctl::kGuestInitPort, alive,
                                     std::min(deadline, std::chrono::steady_clock::now() + wait));
    if (served.ok()) {
      if (plugs > 1) spdlog::info("microvm guest {}: its init served after {} plugs", id, plugs);
      return {};
    }
    if (!alive() || std::chrono::steady_clock::now() >= deadline) return served;
    spdlog::warn("microvm guest {}: its init did not answer {} s after the vsock device came ({}): a new device "
                 "daemon and device",
                 id, wait.count(), VsockSeenByGuest(vm + "/qmp.sock", guest.qemu));
    BH_TRY(ReplugVsock(vm + "/qmp.sock", guest.qemu, vm + "/vsock.sock", [&] { return RestartVsockDevice(id, guest); }));
  }
}

VmConfig MicrovmTier::BaseConfig(const GuestShape& shape) const {
  VmConfig config;
  config.qemu = installed_.qemu;
  config.qemu_release = installed_.qemu_release;
  config.kernel = installed_.kernel;
  config.initramfs = dir_ + "/" + kInitramfs;
  // A restored copy's kernel and command line are the template's (its option ROM and firmware
  // tables must be the same sizes as the saved ones).
  config.command_line = KernelCommandLine("--guest-template", installed_.tsc_khz, /*pci=*/true);
  config.kvm = Chosen().kvm;
  config.vcpus = shape.vcpus;
  config.memory_mb = shape.memory_mb;
  return config;
}

Result<std::string> MicrovmTier::BuildShape(const GuestShape& shape, const std::atomic<bool>& stopping) {
  const std::string name = "template-" + shape.Name();
  const std::string sockets = dir_ + "/" + name;
  std::error_code ec;
  fs::remove_all(sockets, ec);
  BH_TRY(MakeDir(sockets, 0700));
  VmConfig config = BaseConfig(shape);
  config.boot_port_socket = sockets + "/boot.sock";
  config.qmp_socket = sockets + "/qmp.sock";
  config.console_log = sockets + "/console.log";
  config.name = "bulkhead-" + name;
  const std::string saved = dir_ + "/" + name + ".state";
  // QEMU maps it and sizes it.
  config.memory_path = TemplateMemory(saved);
  BH_TRY(WriteWholeFile(config.memory_path, "", 0, 0600));
  Status built = BuildTemplate(config, saved, sockets + "/qemu.log", stopping);
  if (!built.ok()) {
    spdlog::warn("microvm template {}: {}", shape.Name(), built.error().message);
    return built.error();  // (its directory kept: QEMU's log and the console say why)
  }
  fs::remove_all(sockets, ec);
  spdlog::info("microvm template {} saved", shape.Name());
  return saved;
}

Result<NetworkAttachment> MicrovmTier::AttachNetwork(const SandboxHandle& handle) { return NetworkOf(handle); }

Status MicrovmTier::SetLimits(const std::string& id, const Limits& limits) {
  {
    std::lock_guard lock(mu_);
    auto it = guests_.find(id);
    if (it != guests_.end() && it->second.memory_mb != GuestMemoryMb(limits))
      return MakeError(ErrorCode::kInvalid,
                       "a microvm sandbox's memory is its guest's size, set when it boots: stop and start it "
                       "with the new memory_mb",
                       "runtime_unsupported");
  }
  // The vCPUs stay; their share of the host's CPU time follows `cpus`.
  return cgroups_.SetLimits(id, HostLimits(limits, Chosen().kvm));
}

Status MicrovmTier::Reattach(const std::string& id, const SandboxHandle& handle, const Limits& limits,
                             const std::string& staging) {
  // A copy of a template is the one with a monitor socket (Launch). The daemon may have ended
  // in a memory snapshot, its guest stopped: the next thaw looks (Continue).
  std::error_code ec;
  const bool restored = fs::exists(VmDir(id) + "/qmp.sock", ec);
  std::lock_guard lock(mu_);
  guests_[id] = Guest{GuestMemoryMb(limits), VcpusFor(limits), restored, handle.pid, restored, {}, 0, staging};
  return {};
}

Status MicrovmTier::SetFrozen(const std::string& id, bool frozen) {
  BH_TRY(cgroups_.SetFrozen(id, frozen));
  Guest guest;
  {
    std::lock_guard lock(mu_);
    auto it = guests_.find(id);
    if (frozen || it == guests_.end() || !it->second.saved) return {};
    guest = it->second;
  }
  const pid_t qemu = guest.qemu;
  BH_TRY(Continue(VmDir(id) + "/qmp.sock", qemu, VmDir(id) + "/vsock.sock"));
  const Status serving = ServeAfterPlug(id, guest, [&] { return ::kill(qemu, 0) == 0; },
                                        std::chrono::steady_clock::now() + kDeviceListens);
  // (its device daemon may be a new one, also where its init still does not serve)
  std::lock_guard lock(mu_);
  if (auto it = guests_.find(id); it != guests_.end()) {
    it->second.children = guest.children;
    it->second.vsock_device = guest.vsock_device;
    it->second.saved = !serving.ok();
  }
  if (!serving.ok())  // (the guest's kernel says what became of the device)
    return MakeError(ErrorCode::kInternal,
                     serving.error().message + ": " + ReadLogTail(guest.staging + "/console.log", 1500));
  return serving;
}

std::string MicrovmTier::MemoryFormat() const {
  if (!MemorySnapshots()) return {};
  // The guest's kernel is in its memory, QEMU's device state is its version's, and its CPUs'
  // state is the accelerator's: TCG's emulated "max" CPU, or under KVM ("-cpu host") the host's.
  return installed_.qemu_version + ", guest kernel " + installed_.kernel_version + ", " +
         (Chosen().kvm ? "kvm on " + HostCpuModel() : "tcg");
}

Status MicrovmTier::Checkpoint(const std::string& id, const SandboxHandle& handle, const std::string& image_dir) {
  {
    std::lock_guard lock(mu_);
    auto it = guests_.find(id);
    if (it == guests_.end()) return MakeError(ErrorCode::kNotFound, "no guest " + id);
    if (!it->second.restored)
      return MakeError(ErrorCode::kInvalid,
                       "this sandbox's guest booted while its shape's template was being built, and only a guest "
                       "started from a template can be saved with its memory (\"memory\": false keeps its files)",
                       "runtime_unsupported");
    it->second.saved = true;  // stopped from here on, also if the save fails half way
  }
  if (!HandleAlive(handle)) return MakeError(ErrorCode::kUnavailable, "sandbox " + id + " is not running");
  // The guest's kernel takes part in the unplug of its vsock device: a frozen guest (paused, or
  // held by the snapshot's freeze, its workload stopped inside by init) runs for it.
  const bool frozen = cgroups_.Frozen(id);
  if (frozen) BH_TRY(cgroups_.SetFrozen(id, false));
  const std::string vm = VmDir(id);
  Status saved = SaveMemoryImage(vm + "/qmp.sock", handle.pid, vm + "/vsock.sock", image_dir);
  if (frozen) {
    Status refrozen = cgroups_.SetFrozen(id, true);
    if (saved.ok() && !refrozen.ok()) saved = refrozen;
  }
  return saved;
}

bool MicrovmTier::Alive(const SandboxHandle& handle) { return HandleAlive(handle); }

Status MicrovmTier::Destroy(const std::string& id, const SandboxHandle& handle) {
  std::vector<pid_t> children;
  {
    std::lock_guard lock(mu_);
    if (auto it = guests_.find(id); it != guests_.end()) {
      children = std::move(it->second.children);
      guests_.erase(it);
    }
  }
  if (HandleAlive(handle)) ::kill(handle.pid, SIGKILL);
  // A paused guest's processes die only once thawed.
  if (cgroups_.Frozen(id)) (void)cgroups_.SetFrozen(id, false);
  Status destroyed = cgroups_.Destroy(id);
  for (pid_t pid : children) ::waitpid(pid, nullptr, WNOHANG);
  std::error_code ec;
  fs::remove_all(VmDir(id), ec);
  if (destroyed.ok() && ec) return SystemError("remove " + VmDir(id), ec.value());
  return destroyed;
}

std::vector<std::string> MicrovmTier::Leftovers() { return WithEntriesOf(cgroups_.List(), vms_root_); }

void MicrovmTier::Release() {
  cgroups_.RemoveParentsIfEmpty();
  ::rmdir(vms_root_.c_str());  // only if empty
}

}  // namespace bulkhead::runtime::microvm
