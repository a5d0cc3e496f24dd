#include "runtime/gvisor/gvisor_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/ctl_protocol.h"
#include "common/id_ranges.h"
#include "common/read_file.h"
#include "common/run_program.h"
#include "common/scope_guard.h"
#include "runtime/child_syscalls.h"
#include "runtime/clone_shared.h"
#include "runtime/gvisor/launch.h"
#include "runtime/gvisor/oci_spec.h"
#include "runtime/process.h"
#include "runtime/root_plan.h"
#include "runtime/seccomp.h"
#include "runtime/user_namespace.h"

namespace bulkhead::runtime::gvisor {
namespace fs = std::filesystem;
namespace {

constexpr size_t kChildStack = 64 * 1024;
// The control directory in the sandbox's staging directory (oci_spec.h kControlTarget inside).
constexpr char kControlDir[] = "/ctl";
// How long a booted sandbox's init may take to dial the daemon (runsc is back once init was
// exec'd).
constexpr auto kInitDials = std::chrono::seconds(20);
// How long runsc's state, pause and resume may take: a wedged Sentry would block the caller
// (at a restart, the daemon's recovery) for good.
constexpr auto kRunscControlTimeout = std::chrono::seconds(15);
// How long a checkpoint may take: it writes the sandbox's memory (516 MiB in ~0.2 s here, so
// this is room for tens of GiB on a slow disk).
constexpr auto kCheckpointTimeout = std::chrono::minutes(5);

// Whether something listens on the unix socket at `path` (an older daemon's sandbox's init).
bool Listening(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size() + 1, sizeof addr.sun_path));
  return fd && ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

// Where the launcher attaches the tier's sidecar directory (MakeSidecarDir) for runsc.
constexpr char kSidecarsMount[] = "/sidecars";

// The mount steps and bundle mounts of a sandbox's filesystems (launch.h): the image's root,
// idmapped from the stored ids, under the writable layer; host directories (the host image)
// read-only, under the image's own files at the same path where it has some; volumes,
// idmapped; the control directory; runsc's sidecars, where there are some.
void PlanFilesystems(const LaunchSpec& spec, const std::string& control, const std::string& sidecars,
                     LaunchPlan& plan, BundleSpec& bundle) {
  const std::string t = kMountPoint;
  const std::string root = PlanRootOverlay(spec.rootfs, t, plan.steps);
  bundle.root = root;
  plan.root = root;
  plan.top_level_names = {"proc", "dev", "sys", "tmp"};
  for (size_t i = 0; i < spec.rootfs.host_binds.size(); i++) {
    const std::string& dir = spec.rootfs.host_binds[i];
    plan.top_level_names.push_back(dir.substr(1, dir.find('/', 1) - 1));
    bundle.binds.push_back({PlanHostDir(spec.rootfs, dir, i, t, plan.steps), dir, true});
  }
  for (size_t i = 0; i < spec.volumes.size(); i++) {
    const VolumeBind& volume = spec.volumes[i];
    // Below a host directory (bound read-only), or below the root.
    LaunchPlan::MountPoint point{root, {}, true};
    std::string rest = volume.target;
    for (const BundleMount& bind : bundle.binds) {
      if (bind.read_only && volume.target.rfind(bind.target + "/", 0) == 0) {
        point = {bind.source, {}, false};
        rest = volume.target.substr(bind.target.size());
      }
    }
    std::istringstream parts(rest);
    for (std::string name; std::getline(parts, name, '/');)
      if (!name.empty()) point.components.push_back(name);
    plan.volume_points.push_back(std::move(point));
    const std::string attached = t + "/volume" + std::to_string(i);
    plan.steps.push_back({MountStep::kDir, "", attached});
    plan.steps.push_back({MountStep::kClone, volume.source, attached, "", !volume.read_only, true});
    bundle.binds.push_back({attached, volume.target, volume.read_only});
  }
  plan.steps.push_back({MountStep::kDir, "", t + kControlDir});
  plan.steps.push_back({MountStep::kClone, control, t + kControlDir, "", true, false});
  bundle.control_source = t + kControlDir;
  if (!sidecars.empty()) {
    plan.steps.push_back({MountStep::kDir, "", t + kSidecarsMount});
    plan.steps.push_back({MountStep::kClone, sidecars, t + kSidecarsMount, "", false, false});
  }
}

// The sandbox's control directory on the host, fresh for this boot: init's binary and the
// seccomp filter (linked from the tier's copies, root's and read-only), owned by the sandbox's
// root, the uid its Sentry and gofer run as (the daemon's socket there is handed to it too).
Status PrepareControlDir(const std::string& tier_dir, const std::string& control, uid_t host_uid) {
  std::error_code ec;
  fs::remove_all(control, ec);
  BH_TRY(MakeDir(control, 0700));
  if (::chown(control.c_str(), host_uid, host_uid) != 0) return SystemError("chown " + control, errno);
  for (const char* name : {kInitName, kSeccompName}) {
    const std::string from = tier_dir + "/" + name, to = control + "/" + name;
    if (::link(from.c_str(), to.c_str()) != 0) return SystemError("link " + to, errno);
  }
  return {};
}

// Whether a user other than root may run `path`: every directory above it searchable by
// others, and the file executable by them.
bool OthersMayRun(const std::string& path) {
  for (fs::path p = path; !p.empty() && p != p.root_path(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
  }
  return true;
}

// The sidecar binaries runsc looks for (in GVISOR_SIDECAR_BINARIES_DIR, which the launcher
// attaches for it): bulkhead's Sentry prewarmer (src/sentry_prewarmer says why it saves ~15 ms
// per start) and, as runsc needs beside it, the Sentry's binary, which is runsc itself. Both
// are run as the sandbox's unprivileged host uid, so the directory is searchable by others (it
// is reachable only through the launcher's mount: the state directory above it is root's) and
// runsc must be runnable by others where it is. Else there is no directory (""), and runsc
// boots its Sentry the slower way; `why_not` says why.
Result<std::string> MakeSidecarDir(const std::string& tier_dir, const std::string& prewarmer_binary,
                                   const std::string& runsc, std::string& why_not) {
  const std::string dir = tier_dir + "/runsc-sidecars";
  std::error_code ec;
  fs::remove_all(dir, ec);
  auto prewarmer = ReadSmallFile(prewarmer_binary, 16 << 20);
  if (!prewarmer) {
    why_not = "cannot read " + prewarmer_binary;
    return std::string();
  }
  if (!OthersMayRun(runsc)) {
    why_not = "users other than root may not run " + runsc;
    return std::string();
  }
  BH_TRY(MakeDir(dir, 0700));
  if (::chmod(dir.c_str(), 0711) != 0) return SystemError("chmod " + dir, errno);
  // A copy, as of init: a rebuild does not change it under a starting sandbox.
  BH_TRY(WriteWholeFile(dir + "/gvisor-sentry-prewarmer", prewarmer->data(), prewarmer->size(), 0555));
  const std::string sentry = dir + "/gvisor_sentry";
  if (::symlink(runsc.c_str(), sentry.c_str()) != 0) return SystemError("symlink " + sentry, errno);
  return dir;
}

}  // namespace

Result<std::unique_ptr<GvisorTier>> GvisorTier::Create(const std::string& tag, const std::string& state_dir,
                                                       const std::string& init_binary,
                                                       const std::string& prewarmer_binary, Runsc runsc) {
  auto cgroups = Cgroups::Open(tag + "-gvisor", /*inits_apart=*/false);
  if (!cgroups) return cgroups.error();
  BH_TRY(MakeDir(kMountPoint, 0700));
  const std::string dir = state_dir + "/gvisor";
  BH_TRY(MakeDir(dir, 0700));
  // Copies, not the build's files: linked into each sandbox's control directory, on this
  // filesystem, and not changed under a running sandbox by a rebuild.
  auto init = ReadSmallFile(init_binary, 64 << 20);
  if (!init) return MakeError(ErrorCode::kUnavailable, "cannot read " + init_binary);
  BH_TRY(WriteWholeFile(dir + "/" + kInitName, init->data(), init->size(), 0555));
  auto filter = BuildSeccompFilter();
  if (!filter) return filter.error();
  BH_TRY(WriteWholeFile(dir + "/" + kSeccompName, filter->data(), filter->size() * sizeof(sock_filter), 0444));
  const std::string runsc_root = "/run/bulkhead/gvisor-" + tag;
  BH_TRY(MakeDir("/run/bulkhead", 0700));
  BH_TRY(MakeDir(runsc_root, 0700));
  std::string why_not;
  auto sidecars = MakeSidecarDir(dir, prewarmer_binary, runsc.path, why_not);
  if (!sidecars) return sidecars.error();
  if (sidecars->empty()) spdlog::warn("gvisor runtime: no Sentry prewarmer ({}): each sandbox starts ~15 ms slower", why_not);
  return std::unique_ptr<GvisorTier>(
      new GvisorTier(std::move(*cgroups), dir, runsc_root, std::move(*sidecars), std::move(runsc)));
}

Capabilities GvisorTier::capabilities() const {
  return {.pause = true, .filesystem_snapshot = true, .memory_snapshot = true, .idmapped_volumes = true,
          .pooling = true, .limits_in_sandbox = true, .network_egress = true};
}

std::vector<std::pair<std::string, std::string>> GvisorTier::Details() const {
  return {{"runsc", runsc_.path},
          {"runsc_version", runsc_.version},
          {"runsc_origin", runsc_.origin},
          {"runsc_sentry_prewarmer", sidecar_dir_.empty() ? "none" : sidecar_dir_ + "/gvisor-sentry-prewarmer"}};
}

ctl::LimitsMessage GvisorTier::InsideLimits(const Limits& limits) {
  ctl::LimitsMessage inside = LimitsInside(limits);
  const int64_t carried = std::max<int64_t>(16, inside.memory_bytes / kTaskHostBytes);
  inside.pids = static_cast<int>(std::min<int64_t>(inside.pids, carried));
  return inside;
}

Limits GvisorTier::HostLimits(const Limits& sandbox) {
  Limits host = sandbox;
  // The sandbox's memory (held inside by init: init/memory_guard.h), each task's host cost
  // beyond it, and room for the Sentry's and gofer's own.
  const int64_t tasks_mb = InsideLimits(sandbox).pids * kTaskHostBytes >> 20;
  host.memory_mb = sandbox.memory_mb + tasks_mb + std::max<int64_t>(64, sandbox.memory_mb / 8);
  host.pids = sandbox.pids * 2 + 512;
  return host;
}

std::shared_ptr<const InitDialer> GvisorTier::Dialer(const std::string& staging) const {
  const std::string control = staging + kControlDir;
  {
    std::lock_guard lock(listeners_mu_);
    if (auto launched = launched_listeners_.extract(staging)) return std::move(launched.mapped());
  }
  // A sandbox running before this daemon started: an older daemon's has init listening itself.
  const std::string old_socket = control + "/" + kOldSocketName;
  if (Listening(old_socket)) return UnixSocketDialer(old_socket);
  // Else its init dials again, until this daemon listens (the control directory is the
  // sandbox's host uid's).
  struct stat dir {};
  const uid_t owner = ::stat(control.c_str(), &dir) == 0 ? dir.st_uid : 0;
  return InitListener::Listen(control + "/" + ctl::kDaemonSocketName, owner);
}

Result<SandboxHandle> GvisorTier::Launch(const LaunchSpec& spec) {
  const std::string control = spec.staging + kControlDir;
  auto stored_ids = CreateUserNamespace(spec.host_uid, kStoredIdBase);
  if (!stored_ids) return stored_ids.error();
  BH_TRY(cgroups_.Create(spec.id, HostLimits(spec.limits)));
  // Whatever a failed launch made: runsc's processes (all in the cgroups) and state.
  ScopeGuard undo([&] { (void)Destroy(spec.id, {}); });
  BH_TRY(cgroups_.SetBackground(spec.id, spec.background));
  auto join = cgroups_.OpenJoinFds(spec.id);
  if (!join) return join.error();
  BH_TRY(PrepareControlDir(dir_, control, spec.host_uid));
  auto listener = InitListener::Listen(control + "/" + ctl::kDaemonSocketName, spec.host_uid);
  BH_TRY(listener->status());

  // runsc's state of this boot (a stopped sandbox's last boot left its own).
  const std::string runsc_root = RunscRoot(spec.id), bundle_dir = spec.staging + "/bundle";
  const std::string pid_file = spec.staging + "/sandbox.pid", log = spec.staging + "/runsc.log";
  std::error_code ec;
  for (const std::string& dir : {runsc_root, bundle_dir}) {
    fs::remove_all(dir, ec);
    BH_TRY(MakeDir(dir, 0700));
  }
  ::unlink(pid_file.c_str());

  LaunchPlan plan;
  plan.tmpfs_options = "mode=0711,size=64k";
  BundleSpec bundle;
  bundle.host_uid = spec.host_uid;
  bundle.shm_bytes = (spec.limits.memory_mb / 2 + 1) << 20;
  bundle.limits = ctl::Encode(LimitsInsideFor(spec.limits));
  PlanFilesystems(spec, control, sidecar_dir_, plan, bundle);
  plan.root_owner = spec.host_uid;
  const std::string config = OciConfig(bundle).dump();
  BH_TRY(WriteWholeFile(bundle_dir + "/config.json", config.data(), config.size(), 0600));

  UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!log_fd) return SystemError("create " + log, errno);
  plan.log_fd = log_fd.get();
  plan.stored_ids_fd = stored_ids->get();
  for (const auto& fd : join->sandbox) plan.cgroup_join_fds.push_back(fd.get());
  std::vector<std::string> args = {runsc_.path,
                                   "--root", runsc_root,
                                   // The sandbox's sockets are host sockets in its own network
                                   // namespace (gvisor_tier.h).
                                   "--network=host",
                                   // Writes go to the writable layer, not to an overlay in memory.
                                   "--overlay2=none",
                                   // Init dials the daemon's socket in the control directory.
                                   "--host-uds=open",
                                   // The launcher put runsc in the sandbox's cgroups.
                                   "--ignore-cgroups"};
  if (spec.memory_image.empty()) {
    args.insert(args.end(), {"run", "--detach"});
  } else {
    // Resumed, not booted: the image's processes go on in this bundle's mounts. runsc would
    // refuse a bundle whose uid mappings differ from the checkpoint's, and each sandbox has a
    // host range of its own: its files were moved to this range, and what the Sentry saved is
    // in the sandbox's own ids, which the new mappings give the same meaning. So runsc's
    // comparison only warns (in runsc.log); the core restores a snapshot only with the
    // settings it was taken with (its image, volumes and tier). (runsc's --background page
    // loading made no difference here: its kernel waits for the pages anyway.)
    args.insert(args.end(),
                {"--restore-spec-validation=warning", "restore", "--detach", "--image-path", spec.memory_image});
  }
  args.insert(args.end(), {"--bundle", bundle_dir, "--pid-file", pid_file, spec.id});
  // BULKHEAD_RUNSC_DEBUG=DIR: runsc's debug logs (every syscall of the sandbox) go there.
  if (const char* debug = ::getenv("BULKHEAD_RUNSC_DEBUG"); debug && *debug == '/')
    args.insert(args.begin() + 1, {"--debug", "--strace", std::string("--debug-log=") + debug + "/" + spec.id + "/"});
  for (auto& arg : args) plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  std::string path_env = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::string sidecar_env = std::string("GVISOR_SIDECAR_BINARIES_DIR=") + kMountPoint + kSidecarsMount;
  plan.envp = {path_env.data()};
  if (!sidecar_dir_.empty()) plan.envp.push_back(sidecar_env.data());
  plan.envp.push_back(nullptr);

  const auto runsc_started = std::chrono::steady_clock::now();
  const pid_t pid = CloneOnBorrowedMemory(LaunchMain, CLONE_VM | CLONE_VFORK | SIGCHLD, &plan, kChildStack);
  if (pid < 0) return SystemError("clone the gvisor launcher", errno);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (plan.failed_step) {
    if (std::strcmp(plan.failed_step, child::kRootMountPointStep) == 0) return UnbootableFiles();
    if (plan.failed_volume >= 0)
      return VolumeMountPointError(spec.volumes[plan.failed_volume], plan.failed_step, plan.failed_errno);
    return SystemError(std::string("gvisor launch failed at ") + plan.failed_step, plan.failed_errno);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return MakeError(ErrorCode::kInternal, "runsc could not start the sandbox: " + ReadLogTail(log));
  }
  auto sandbox_pid = ReadSmallFile(pid_file);
  const pid_t sentry = sandbox_pid ? static_cast<pid_t>(std::strtol(sandbox_pid->c_str(), nullptr, 10)) : 0;
  const SandboxHandle handle = HandleOf(sentry);
  if (!HandleAlive(handle)) return MakeError(ErrorCode::kInternal, "runsc's sandbox is gone: " + ReadLogTail(log));
  const auto runsc_done = std::chrono::steady_clock::now();
  // runsc is back once init was exec'd; it dials the daemon a moment later.
  const auto deadline = std::chrono::steady_clock::now() + kInitDials;
  while (!listener->WaitForInit(std::chrono::milliseconds(20))) {
    if (!HandleAlive(handle) || std::chrono::steady_clock::now() > deadline)
      return MakeError(ErrorCode::kInternal, "the sandbox's init did not start: " + ReadLogTail(log));
  }
  {
    using std::chrono::duration_cast, std::chrono::microseconds;
    spdlog::log(spec.memory_image.empty() ? spdlog::level::debug : spdlog::level::info,
                "gvisor: {} {}: runsc {} us, init dialed {} us later", spec.id,
                spec.memory_image.empty() ? "booted" : "restored",
                duration_cast<microseconds>(runsc_done - runsc_started).count(),
                duration_cast<microseconds>(std::chrono::steady_clock::now() - runsc_done).count());
  }
  BH_TRY(memory_watch_.Watch(spec.id, HostLimits(spec.limits).memory_mb << 20));
  {
    std::lock_guard lock(listeners_mu_);
    launched_listeners_[spec.staging] = std::move(listener);
  }
  undo.Dismiss();
  return handle;
}

Result<NetworkAttachment> GvisorTier::AttachNetwork(const SandboxHandle& handle) { return NetworkOf(handle); }

Status GvisorTier::SetLimits(const std::string& id, const Limits& limits) {
  BH_TRY(cgroups_.SetLimits(id, HostLimits(limits)));
  return memory_watch_.Watch(id, HostLimits(limits).memory_mb << 20);
}

Status GvisorTier::Reattach(const std::string& id, const SandboxHandle& /*handle*/, const Limits& limits,
                            const std::string& /*staging*/) {
  return memory_watch_.Watch(id, HostLimits(limits).memory_mb << 20);
}

bool GvisorTier::Alive(const SandboxHandle& handle) { return HandleAlive(handle); }

std::string GvisorTier::RunscStatus(const std::string& id) const {
  auto state = RunProgramOutput({runsc_.path, "--root", RunscRoot(id), "state", id}, kRunscControlTimeout);
  if (!state) return "";
  auto doc = nlohmann::json::parse(*state, nullptr, false);
  return doc.is_object() && doc.contains("status") && doc["status"].is_string() ? doc["status"].get<std::string>() : "";
}

Status GvisorTier::SetFrozen(const std::string& id, bool frozen) {
  auto changed =
      RunProgramOutput({runsc_.path, "--root", RunscRoot(id), frozen ? "pause" : "resume", id}, kRunscControlTimeout);
  if (changed) return {};
  // Already so (a restart re-applies what the row says), or gone.
  if (RunscStatus(id) == (frozen ? "paused" : "running")) return {};
  return MakeError(ErrorCode::kUnavailable, std::string("sandbox ") + id + " did not " + (frozen ? "pause" : "resume") +
                                                ": " + changed.error().message);
}

bool GvisorTier::Frozen(const std::string& id) { return RunscStatus(id) == "paused"; }

Status GvisorTier::Checkpoint(const std::string& id, const SandboxHandle& /*handle*/, const std::string& image_dir) {
  auto saved = RunProgramOutput(
      {runsc_.path, "--root", RunscRoot(id), "checkpoint", "--leave-running", "--image-path", image_dir, id},
      kCheckpointTimeout);
  if (!saved) return MakeError(ErrorCode::kUnavailable, "sandbox " + id + " could not be checkpointed: " + saved.error().message);
  return {};
}

std::vector<std::string> GvisorTier::Leftovers() { return WithEntriesOf(cgroups_.List(), runsc_root_); }

void GvisorTier::Release() {
  cgroups_.RemoveParentsIfEmpty();
  ::rmdir(runsc_root_.c_str());  // only if empty
}

Status GvisorTier::Destroy(const std::string& id, const SandboxHandle& handle) {
  // The Sentry first: its gofer and its stub processes end with it; the cgroup's kill catches
  // the rest.
  memory_watch_.Forget(id);
  if (HandleAlive(handle)) ::kill(handle.pid, SIGKILL);
  BH_TRY(cgroups_.Destroy(id));
  std::error_code ec;
  fs::remove_all(RunscRoot(id), ec);
  if (ec) return SystemError("remove " + RunscRoot(id), ec.value());
  return {};
}

}  // namespace bulkhead::runtime::gvisor
