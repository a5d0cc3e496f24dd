#include "oci/commands.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/read_file.h"
#include "common/time_format.h"
#include "common/unique_fd.h"
#include "oci/ceiling.h"
#include "oci/container_root.h"
#include "oci/container_state.h"
#include "oci/pod_egress.h"
#include "oci/process_setup.h"
#include "runtime/child_syscalls.h"
#include "runtime/process.h"
#include "runtime/seccomp.h"
#include "runtime/uid_ranges.h"
#include "runtime/user_namespace.h"

namespace bulkhead::oci {
namespace {

using nlohmann::json;

// The annotation containerd's CRI puts on every container of a pod, naming the pod's sandbox.
constexpr const char* kSandboxIdAnnotation = "io.kubernetes.cri.sandbox-id";

int FailWith(const GlobalOptions& global, const Error& error) { return Fail(global, error.message); }

// Written whole under another name, then renamed: containerd reads it as soon as we exit.
Status WritePidFile(const std::string& path, pid_t pid) {
  if (path.empty()) return {};
  const std::string text = std::to_string(pid), temporary = path + ".tmp";
  BH_TRY(WriteWholeFile(temporary, text.data(), text.size(), 0644));
  if (::rename(temporary.c_str(), path.c_str()) != 0) return SystemError("rename " + path, errno);
  return {};
}

runtime::UidRanges Ranges(const std::string& root) { return runtime::UidRanges("bulkhead-oci:" + root); }
std::string PodFile(const std::string& root, const std::string& pod) { return root + "/.pods/" + pod; }

// The first host uid of the range a pod holds (its .pods file), if it holds one.
std::optional<uid_t> HeldRange(const std::string& root, const std::string& pod) {
  auto held = ReadSmallFile(PodFile(root, pod));
  uid_t base = 0;
  if (!held || std::from_chars(held->data(), held->data() + held->size(), base).ec != std::errc()) return std::nullopt;
  return base;
}

// The host uid range of the container's pod: one per pod, so that what one container writes
// to a volume shows with the same ids in the others.
Result<uid_t> PodRange(const std::string& root, const std::string& pod) {
  if (auto held = HeldRange(root, pod)) return *held;
  auto base = Ranges(root).Claim(pod);
  if (!base.ok()) return base.error();
  ::mkdir((root + "/.pods").c_str(), 0700);
  const std::string text = std::to_string(*base);
  BH_TRY(WriteWholeFile(PodFile(root, pod), text.data(), text.size(), 0600));
  return *base;
}

// Gives the pod's range back once no container of the pod is left but `leaving`.
void ReleasePodRange(const std::string& root, const std::string& pod, const std::string& leaving) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename();
    if (name == leaving || name[0] == '.') continue;
    auto other = LoadState(root, name);
    if (other.ok() && other->pod == pod) return;
  }
  if (auto held = HeldRange(root, pod)) Ranges(root).Release(*held);
  ::unlink(PodFile(root, pod).c_str());
}

// A JSON file the caller names ("-": stdin), up to 16 MiB.
Result<json> ReadJsonFile(const std::string& path) {
  auto text = ReadSmallFile(path == "-" ? "/dev/stdin" : path, 16 << 20);
  if (!text) return SystemError("read " + path, errno);
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    return MakeError(ErrorCode::kBadRequest, path + ": " + e.what());
  }
}

int NamespaceFlag(const std::string& type) {
  if (type == "pid") return CLONE_NEWPID;
  if (type == "network") return CLONE_NEWNET;
  if (type == "mount") return CLONE_NEWNS;
  if (type == "ipc") return CLONE_NEWIPC;
  if (type == "uts") return CLONE_NEWUTS;
  if (type == "cgroup") return CLONE_NEWCGROUP;
  return 0;
}

// Reads the setup child's one line; "" when it said ok.
std::string ReadReport(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.find('\n') != std::string::npos) break;
  }
  if (text.empty()) return "the container's setup process died before it was ready";
  if (text.back() == '\n') text.pop_back();
  return text == "ok" ? "" : text;
}

struct CreatePlan {
  const GlobalOptions* global;
  const CreateOptions* options;
  Spec spec;
  std::string rootfs;
  uid_t host_uid = 0;
  ContainerCgroup cgroup;
  UniqueFd userns, console, fifo, lock, report;
  std::vector<sock_filter> filter;
  std::vector<std::pair<int, UniqueFd>> join;  // namespaces to enter by path: (flag, fd)
  int unshare_flags = 0;
};

// The container's first process: namespaces, filesystems, identity, then held at the exec fifo
// until `start`. Never returns.
[[noreturn]] void ContainerMain(CreatePlan& plan) {
  plan.lock.reset();  // the root's flock is shared with the parent's descriptor: `start` needs it
  const SetupReport report{plan.report.get()};
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // until it is ready: a killed `create` leaves nothing
  // Into the container's cgroup itself (this `create` stays out: a failure removes the group and
  // kills what is in it), before the cgroup namespace that makes the group its root.
  report.Check(plan.cgroup.Join(0));
  report.Check(ActAsContainerRootOnHost(plan.host_uid));
  for (auto& [flag, fd] : plan.join)
    if (::setns(fd.get(), flag) != 0) report.Fail(SystemError("join a namespace of the spec", errno));
  if (::unshare(plan.unshare_flags | CLONE_NEWNS | CLONE_NEWCGROUP) != 0) report.Fail(SystemError("unshare", errno));
  // A network namespace of its own (no CNI's): loopback alone, up.
  if ((plan.unshare_flags & CLONE_NEWNET) && !runtime::child::LoopbackUp()) report.Fail(SystemError("bring lo up", errno));
  RootPlan root{.rootfs = plan.rootfs,
                .scratch = StateDir(plan.global->root, plan.options->id) + "/layers",
                .idmap_fd = plan.userns.get(),
                .host_uid = plan.host_uid,
                .spec = &plan.spec,
                .cgroup = &plan.cgroup,
                .new_uts = (plan.unshare_flags & CLONE_NEWUTS) != 0};
  report.Check(AssembleRoot(root));
  if (plan.spec.process.oom_score_adj)
    report.Check(WriteSmallFile("/proc/self/oom_score_adj", std::to_string(*plan.spec.process.oom_score_adj)));
  if (plan.spec.process.terminal) report.Check(SetupConsole(plan.console.get()));
  plan.console.reset();
  report.Check(BecomeProcessUser(plan.userns.get(), plan.spec.process));
  plan.userns.reset();
  auto executable = FindExecutable(plan.spec.process);
  if (!executable.ok()) report.Fail(executable.error());
  report.Check(LockDown(plan.filter));
  ::prctl(PR_SET_PDEATHSIG, 0);
  report.Ok();
  plan.report.reset();
  // Held here until `start` opens the fifo's other end.
  const std::string fifo = "/proc/self/fd/" + std::to_string(plan.fifo.get());
  int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(1);
  ::close(fd);
  plan.fifo.reset();
  Status exec = ExecProcess(*executable, plan.spec.process);
  std::string message = "bulkhead-oci: " + exec.error().message + "\n";
  (void)!::write(2, message.data(), message.size());
  _exit(127);
}

}  // namespace

int Fail(const GlobalOptions& global, const std::string& message) {
  std::cerr << "bulkhead-oci: " << message << std::endl;
  if (!global.log.empty()) {
    std::string line = global.log_format == "json"
                           ? json{{"level", "error"}, {"msg", message}, {"time", Rfc3339Millis(UnixMillis())}}.dump() + "\n"
                           : "error: " + message + "\n";
    UniqueFd fd(::open(global.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
    if (fd) (void)!::write(fd.get(), line.data(), line.size());
  }
  return 1;
}

int Create(const GlobalOptions& global, const CreateOptions& options) {
  if (auto valid = CheckId(options.id); !valid.ok()) return FailWith(global, valid.error());
  auto lock = LockRoot(global.root);
  if (!lock.ok()) return FailWith(global, lock.error());
  const std::string dir = StateDir(global.root, options.id);
  if (::mkdir(dir.c_str(), 0700) != 0)
    return Fail(global, errno == EEXIST ? "container with id exists: " + options.id : "mkdir " + dir + ": " + std::strerror(errno));
  CreatePlan plan;
  plan.global = &global;
  plan.options = &options;
  bool claimed_range = false, made_cgroup = false;
  std::string pod = options.id;
  pid_t child = -1;
  runtime::SandboxHandle egress_helper;
  auto fail = [&](const Error& error) {
    StopEgressHelper(egress_helper);
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
    if (made_cgroup) (void)plan.cgroup.Remove();
    if (claimed_range) ReleasePodRange(global.root, pod, options.id);
    std::error_code ignored;
    ::umount2((dir + "/layers").c_str(), MNT_DETACH);
    std::filesystem::remove_all(dir, ignored);
    return FailWith(global, error);
  };

  std::string bundle = std::filesystem::absolute(options.bundle).lexically_normal();
  if (bundle.size() > 1 && bundle.back() == '/') bundle.pop_back();
  auto config = ReadJsonFile(bundle + "/config.json");
  if (!config.ok()) return fail(config.error());
  auto spec = ParseSpec(*config);
  if (!spec.ok()) return fail(spec.error());
  plan.spec = std::move(*spec);
  if (auto within = CheckCeiling(plan.spec); !within.ok()) return fail(within.error());
  auto egress = PodEgressSettings(plan.spec.annotations);
  if (!egress.ok()) return fail(egress.error());
  plan.rootfs = plan.spec.root_path[0] == '/' ? plan.spec.root_path : bundle + "/" + plan.spec.root_path;
  std::error_code error;
  plan.rootfs = std::filesystem::canonical(plan.rootfs, error);
  if (error) return fail(MakeError(ErrorCode::kInvalid, "rootfs " + plan.spec.root_path + ": " + error.message()));

  // Namespaces: each of these new or joined; the user namespace is always bulkhead's own.
  for (const char* type : {"pid", "network", "mount", "ipc", "uts"}) {
    if (!plan.spec.FindNamespace(type))
      return fail(MakeError(ErrorCode::kInvalid, std::string("the spec shares the host's ") + type +
                                                     " namespace: bulkhead runs no container in the host's namespaces"));
  }
  if (!plan.spec.FindNamespace("mount")->path.empty())
    return fail(MakeError(ErrorCode::kInvalid, "a container's mount namespace is always its own"));
  UniqueFd pid_namespace;
  for (const Namespace& ns : plan.spec.namespaces) {
    const int flag = NamespaceFlag(ns.type);
    if (!flag || ns.type == "mount" || ns.type == "cgroup") continue;
    if (ns.path.empty()) {
      if (ns.type != "pid") plan.unshare_flags |= flag;
      continue;
    }
    UniqueFd fd(::open(ns.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail(SystemError("open the " + ns.type + " namespace " + ns.path, errno));
    if (ns.type == "pid") {
      pid_namespace = std::move(fd);
    } else {
      plan.join.emplace_back(flag, std::move(fd));
    }
  }

  if (auto it = plan.spec.annotations.find(kSandboxIdAnnotation); it != plan.spec.annotations.end()) {
    if (CheckId(it->second).ok()) pod = it->second;
  }
  auto range = PodRange(global.root, pod);
  if (!range.ok()) return fail(range.error());
  plan.host_uid = *range;
  claimed_range = true;
  auto cgroup = ContainerCgroup::Resolve(plan.spec.cgroups_path, options.id, global.systemd_cgroup);
  if (!cgroup.ok()) return fail(cgroup.error());
  plan.cgroup = std::move(*cgroup);
  made_cgroup = true;
  if (auto made = plan.cgroup.Create(plan.spec.resources); !made.ok()) return fail(made.error());
  auto userns = runtime::CreateUserNamespace(plan.host_uid);
  if (!userns.ok()) return fail(userns.error());
  plan.userns = std::move(*userns);
  auto filter = runtime::BuildSeccompFilter();
  if (!filter.ok()) return fail(filter.error());
  plan.filter = std::move(*filter);
  if (plan.spec.process.terminal) {
    if (options.console_socket.empty()) return fail(MakeError(ErrorCode::kInvalid, "a terminal needs --console-socket"));
    auto console = ConnectConsoleSocket(options.console_socket);
    if (!console.ok()) return fail(console.error());
    plan.console = std::move(*console);
  }
  const std::string fifo = ExecFifo(global.root, options.id);
  if (::mkfifo(fifo.c_str(), 0622) != 0 || ::chmod(fifo.c_str(), 0622) != 0) return fail(SystemError("mkfifo " + fifo, errno));
  plan.fifo = UniqueFd(::open(fifo.c_str(), O_PATH | O_CLOEXEC));
  if (!plan.fifo) return fail(SystemError("open " + fifo, errno));
  if (::mkdir((dir + "/layers").c_str(), 0700) != 0) return fail(SystemError("mkdir " + dir + "/layers", errno));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return fail(SystemError("pipe", errno));
  UniqueFd report_read(pipe_fds[0]);
  plan.report = UniqueFd(pipe_fds[1]);
  plan.lock = std::move(*lock);

  // The pid namespace takes effect for the next child.
  if (pid_namespace ? ::setns(pid_namespace.get(), CLONE_NEWPID) != 0 : ::unshare(CLONE_NEWPID) != 0)
    return fail(SystemError("enter the pid namespace", errno));
  std::cout.flush();
  child = ::fork();
  if (child < 0) return fail(SystemError("fork", errno));
  if (child == 0) ContainerMain(plan);
  plan.report.reset();
  const std::string problem = ReadReport(report_read.get());
  if (!problem.empty()) return fail(MakeError(ErrorCode::kInvalid, problem));

  ContainerState state;
  // The pod's egress policy, in force before anything of the pod runs (its first process waits
  // for `start`): its helper is kept by the sandbox container, whose network the pod's others join.
  if (*egress && pod == options.id) {
    const Namespace* network = plan.spec.FindNamespace("network");
    const std::string netns = network->path.empty() ? "/proc/" + std::to_string(child) + "/ns/net" : network->path;
    auto helper = StartEgressHelper(pod, netns, plan.spec.annotations, **egress);
    if (!helper.ok()) return fail(helper.error());
    egress_helper = *helper;
    state.egress_helper = *helper;
  }
  state.id = options.id;
  state.bundle = bundle;
  state.rootfs = plan.rootfs;
  state.created = Rfc3339Millis(UnixMillis());
  state.pid = child;
  state.start_time = runtime::ProcessStartTime(child);
  state.host_uid = plan.host_uid;
  state.pod = pod;
  state.cgroup_dirs = plan.cgroup.Dirs();
  state.cgroup_v2 = plan.cgroup.v2();
  state.annotations = plan.spec.annotations;
  if (auto saved = SaveState(global.root, state); !saved.ok()) return fail(saved.error());
  if (auto written = WritePidFile(options.pid_file, child); !written.ok()) return fail(written.error());
  return 0;
}

int Start(const GlobalOptions& global, const std::string& id) {
  auto state = LoadState(global.root, id);
  if (!state.ok()) return FailWith(global, state.error());
  const std::string status = CurrentStatus(global.root, *state);
  if (status != "created") return Fail(global, "cannot start a container that is " + status);
  UniqueFd fifo(::open(ExecFifo(global.root, id).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fifo) return FailWith(global, SystemError("open the exec fifo", errno));
  // The process opens its end as soon as ours is open, and writes one byte; it may die instead.
  for (int waited_ms = 0;; waited_ms += 50) {
    pollfd poll_fd{fifo.get(), POLLIN, 0};
    if (::poll(&poll_fd, 1, 50) > 0) {
      char byte;
      if (::read(fifo.get(), &byte, 1) == 1) break;
    }
    if (!Alive(*state)) return Fail(global, "the container's process exited before it started");
    if (waited_ms > 10000) return Fail(global, "the container's process did not take the start");
  }
  ::unlink(ExecFifo(global.root, id).c_str());
  return 0;
}

int State(const GlobalOptions& global, const std::string& id) {
  auto state = LoadState(global.root, id);
  if (!state.ok()) return FailWith(global, state.error());
  const std::string status = CurrentStatus(global.root, *state);
  json out = {{"ociVersion", "1.0.2"},
              {"id", state->id},
              {"pid", status == "stopped" ? 0 : state->pid},
              {"status", status},
              {"bundle", state->bundle},
              {"rootfs", state->rootfs},
              {"created", state->created},
              {"owner", ""},
              {"annotations", state->annotations}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}

int Kill(const GlobalOptions& global, const std::string& id, const std::string& signal_name, bool all) {
  auto state = LoadState(global.root, id);
  if (!state.ok()) return FailWith(global, state.error());
  std::string name = signal_name;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  int signal = 0;
  if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) {
    signal = std::stoi(name);
  } else {
    for (int s = 1; s < NSIG; s++) {
      const char* abbrev = ::sigabbrev_np(s);
      if (abbrev && name == abbrev) signal = s;
    }
  }
  if (signal <= 0 || signal >= NSIG) return Fail(global, "unknown signal \"" + signal_name + "\"");
  // Every process left in its cgroup, its first one gone or not (exec'd ones in a pod's
  // shared pid namespace outlive it).
  if (all) {
    for (pid_t pid : state->Cgroup().Pids()) ::kill(pid, signal);
    return 0;
  }
  if (!Alive(*state)) return Fail(global, "container not running");
  if (::kill(state->pid, signal) != 0) return FailWith(global, SystemError("kill", errno));
  return 0;
}

int Delete(const GlobalOptions& global, const std::string& id, bool force) {
  auto lock = LockRoot(global.root);
  if (!lock.ok()) return FailWith(global, lock.error());
  auto state = LoadState(global.root, id);
  if (!state.ok()) {
    // A `create` killed before it kept its state (containerd's timeout) left its dir and
    // perhaps its pod's range: gone with it. (Its cgroup is found by path only in its spec.)
    if (CheckId(id).ok()) {
      std::error_code ignored;
      std::filesystem::remove_all(StateDir(global.root, id), ignored);
      ReleasePodRange(global.root, id, id);
    }
    return FailWith(global, state.error());
  }
  const std::string status = CurrentStatus(global.root, *state);
  if ((status == "running" || status == "paused") && !force)
    return Fail(global, "cannot delete container " + id + " that is not stopped: " + status);
  if (auto removed = state->Cgroup().Remove(); !removed.ok()) return FailWith(global, removed.error());
  StopEgressHelper(state->egress_helper);
  ReleasePodRange(global.root, state->pod, id);
  std::error_code error;
  std::filesystem::remove_all(StateDir(global.root, id), error);
  if (error) return Fail(global, "remove the state of " + id + ": " + error.message());
  return 0;
}

int Pause(const GlobalOptions& global, const std::string& id, bool pause) {
  auto state = LoadState(global.root, id);
  if (!state.ok()) return FailWith(global, state.error());
  const std::string status = CurrentStatus(global.root, *state);
  if (pause ? status != "running" : status != "paused")
    return Fail(global, std::string("cannot ") + (pause ? "pause" : "resume") + " a container that is " + status);
  if (auto set = state->Cgroup().SetFrozen(pause); !set.ok()) return FailWith(global, set.error());
  return 0;
}

int Ps(const GlobalOptions& global, const std::string& id, const std::string& format) {
  auto state = LoadState(global.root, id);
  if (!state.ok()) return FailWith(global, state.error());
  std::vector<pid_t> pids = state->Cgroup().Pids();
  if (format == "json") {
    std::cout << json(pids).dump() << std::endl;
  } else {
    std::cout << "PID" << std::endl;
    for (pid_t pid : pids) std::cout << pid << std::endl;
  }
  return 0;
}

int Update(const GlobalOptions& global, const std::string& id, const std::string& resources_file) {
  auto state = LoadState(global.root, id);
  if (!state.ok()) return FailWith(global, state.error());
  auto input = ReadJsonFile(resources_file);
  if (!input.ok()) return FailWith(global, input.error());
  auto resources = ParseResources(*input);
  if (!resources.ok()) return FailWith(global, resources.error());
  if (auto set = state->Cgroup().Apply(*resources); !set.ok()) return FailWith(global, set.error());
  return 0;
}

int Exec(const GlobalOptions& global, const ExecOptions& options) {
  auto state = LoadState(global.root, options.id);
  if (!state.ok()) return FailWith(global, state.error());
  const std::string status = CurrentStatus(global.root, *state);
  if (status != "running") return Fail(global, "cannot exec in a container that is " + status);
  auto input = ReadJsonFile(options.process_file);
  if (!input.ok()) return FailWith(global, input.error());
  auto process = ParseProcess(*input);
  if (!process.ok()) return FailWith(global, process.error());
  // The container's namespaces. This process enters those that take effect for its child;
  // the child the cgroup one (after it joins the cgroup), the mount one, and the user one last
  // (entering the others needs host root).
  std::map<std::string, UniqueFd> ns;
  for (const char* name : {"ipc", "uts", "net", "pid", "cgroup", "mnt", "user"}) {
    ns[name] = UniqueFd(::open(("/proc/" + std::to_string(state->pid) + "/ns/" + name).c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns[name]) return FailWith(global, SystemError(std::string("open the container's ") + name + " namespace", errno));
  }
  if (!Alive(*state)) return Fail(global, "container not running");  // the namespaces were its, not a reused pid's
  auto filter = runtime::BuildSeccompFilter();
  if (!filter.ok()) return FailWith(global, filter.error());
  UniqueFd console;
  if (process->terminal) {
    if (options.console_socket.empty()) return Fail(global, "a terminal needs --console-socket");
    auto connected = ConnectConsoleSocket(options.console_socket);
    if (!connected.ok()) return FailWith(global, connected.error());
    console = std::move(*connected);
  }
  for (const auto& [name, flag] : {std::pair{"ipc", CLONE_NEWIPC}, {"uts", CLONE_NEWUTS}, {"net", CLONE_NEWNET},
                                    {"pid", CLONE_NEWPID}})
    if (::setns(ns[name].get(), flag) != 0) return FailWith(global, SystemError("enter the container's namespaces", errno));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return FailWith(global, SystemError("pipe", errno));
  UniqueFd report_read(pipe_fds[0]), report_write(pipe_fds[1]);
  std::cout.flush();
  const pid_t child = ::fork();
  if (child < 0) return FailWith(global, SystemError("fork", errno));
  if (child == 0) {
    report_read.reset();
    const SetupReport report{report_write.get()};
    // Into the container's cgroup (this `exec` stays out), then the namespace rooted there.
    report.Check(state->Cgroup().Join(0));
    if (::setns(ns["cgroup"].get(), CLONE_NEWCGROUP) != 0) report.Fail(SystemError("enter the container's cgroup namespace", errno));
    if (::setns(ns["mnt"].get(), CLONE_NEWNS) != 0) report.Fail(SystemError("enter the container's mount namespace", errno));
    report.Check(ActAsContainerRootOnHost(state->host_uid));
    if (process->oom_score_adj)
      report.Check(WriteSmallFile("/proc/self/oom_score_adj", std::to_string(*process->oom_score_adj)));
    if (process->terminal) report.Check(SetupConsole(console.get()));
    console.reset();
    report.Check(BecomeProcessUser(ns["user"].get(), *process));
    ns.clear();
    auto executable = FindExecutable(*process);
    if (!executable.ok()) report.Fail(executable.error());
    report.Check(LockDown(*filter));
    report.Fail(ExecProcess(*executable, *process).error());
  }
  report_write.reset();
  // Nothing read: the exec closed the pipe.
  char buffer[4096];
  std::string problem;
  for (ssize_t n; (n = ::read(report_read.get(), buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    problem.append(buffer, static_cast<size_t>(n));
  }
  if (!problem.empty()) {
    ::waitpid(child, nullptr, 0);
    if (problem.back() == '\n') problem.pop_back();
    return Fail(global, problem);
  }
  if (auto written = WritePidFile(options.pid_file, child); !written.ok()) return FailWith(global, written.error());
  if (options.detach) return 0;
  int wait_status = 0;
  while (::waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

}  // namespace bulkhead::oci
