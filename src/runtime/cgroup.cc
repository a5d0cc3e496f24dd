#include "runtime/cgroup.h"

#include "common/read_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include <linux/magic.h>
#include <spdlog/spdlog.h>

namespace bulkhead::runtime {
namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";
// v1 hierarchies we use: limits on memory, pids and cpu; cpuacct for usage; freezer to pause.
constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
constexpr size_t kV1Freezer = 4;  // its index in parents_
// Below the sandbox's group (cgroup.h), v2: every process but init, and init's leaf. (v1: where
// daemons before .inits put every process but init.)
constexpr char kWorkload[] = "workload";
constexpr char kInitLeaf[] = "init";
// v1: the inits' group, beside the sandboxes' (a dot: List() skips it).
constexpr char kInits[] = ".inits";

Status WriteFile(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return SystemError("open " + path, errno);
  UniqueFd guard(fd);
  if (::write(fd, value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return SystemError("write " + value + " to " + path, errno);
  return {};
}

std::string ReadFile(const std::string& path) { return ReadSmallFile(path).value_or(""); }

int64_t ReadInt(const std::string& path) {
  std::string s = ReadFile(path);
  return s.empty() ? 0 : std::strtoll(s.c_str(), nullptr, 10);
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// 0755 whatever the daemon's umask: the sandbox reads its own limits there (a read-only bind).
Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (errno == EEXIST) return {};
    return SystemError("mkdir " + path, errno);
  }
  if (::chmod(path.c_str(), 0755) != 0) return SystemError("chmod " + path, errno);
  return {};
}

// The v1 path of a controller; cpu and cpuacct may be co-mounted as "cpu,cpuacct".
std::string V1Mount(const std::string& controller) {
  std::string p = std::string(kRoot) + "/" + controller;
  return Exists(p) ? p : "";
}

// The workload group's share of a sandbox's memory limit.
int64_t WorkloadBytes(int64_t limit) { return limit - std::min(Cgroups::kInitReserve, limit / 4); }

// v1: the memory limit, and the memory+swap limit where swap is accounted (no swap: they are
// equal). memsw must stay >= the limit: when lowering, set memory first, when raising, memsw.
Status SetV1Memory(const std::string& dir, int64_t bytes) {
  bool memsw = Exists(dir + "/memory.memsw.limit_in_bytes");
  int64_t current = ReadInt(dir + "/memory.limit_in_bytes");
  if (memsw && bytes > current) BH_TRY(WriteFile(dir + "/memory.memsw.limit_in_bytes", std::to_string(bytes)));
  BH_TRY(WriteFile(dir + "/memory.limit_in_bytes", std::to_string(bytes)));
  if (memsw && bytes <= current) BH_TRY(WriteFile(dir + "/memory.memsw.limit_in_bytes", std::to_string(bytes)));
  // Without swap accounting, keep the group out of swap entirely.
  if (!memsw) (void)WriteFile(dir + "/memory.swappiness", "0");
  return {};
}

Result<UniqueFd> OpenProcs(const std::string& dir) {
  std::string f = dir + "/cgroup.procs";
  UniqueFd fd(::open(f.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + f, errno);
  return fd;
}

std::vector<pid_t> Procs(const std::string& dir) {
  std::vector<pid_t> pids;
  std::istringstream in(ReadFile(dir + "/cgroup.procs"));
  pid_t pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

// Moving a process between cgroups takes a global lock that, by default, is built for rare
// writers: each move waits for an RCU grace period (~10-20 ms here). "favordynmods" on the
// cgroup2 mount flips it to favour frequent moves, which a sandbox runtime makes. Best
// effort: keep the mount's other options, and carry on without it.
void FavorDynamicMoves() {
  std::istringstream in(ReadFile("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(in, line)) {
    size_t dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, devno, root, mount_point;
    head >> id >> parent >> devno >> root >> mount_point;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, options;
    tail >> fstype >> source >> options;
    if (options.find("favordynmods") != std::string::npos) return;
    std::string keep;
    for (const char* opt : {"nsdelegate", "memory_localevents", "memory_recursiveprot", "memory_hugetlb_accounting"})
      if (options.find(opt) != std::string::npos) keep += std::string(opt) + ",";
    (void)::mount(nullptr, mount_point.c_str(), nullptr, MS_REMOUNT, (keep + "favordynmods").c_str());
    return;
  }
}

}  // namespace

Result<Cgroups> Cgroups::Open(const std::string& tag, bool inits_apart) {
  Cgroups cg;
  struct statfs sfs {};
  if (::statfs(kRoot, &sfs) != 0) return SystemError("statfs /sys/fs/cgroup", errno);
  cg.v2_ = sfs.f_type == CGROUP2_SUPER_MAGIC;
  cg.inits_apart_ = inits_apart;
  FavorDynamicMoves();
  if (cg.v2_ && ReadFile("/proc/cmdline").find("cgroup.memory=nosocket") != std::string::npos) {
    spdlog::warn("cgroup.memory=nosocket on the kernel command line: sandboxes' TCP buffers are not charged to them");
  }
  std::string name = "bulkhead-" + tag;
  if (cg.v2_) {
    std::string parent = std::string(kRoot) + "/" + name;
    BH_TRY(MakeDir(parent));
    // Delegate the controllers we limit to the sandbox groups below.
    BH_TRY(WriteFile(std::string(kRoot) + "/cgroup.subtree_control", "+memory +pids +cpu"));
    BH_TRY(WriteFile(parent + "/cgroup.subtree_control", "+memory +pids +cpu"));
    cg.parents_.push_back(parent);
  } else {
    for (const char* c : kV1Controllers) {
      std::string mount = V1Mount(c);
      if (mount.empty()) return MakeError(ErrorCode::kInternal, std::string("cgroup v1 controller missing: ") + c);
      std::string parent = mount + "/" + name;
      BH_TRY(MakeDir(parent));
      cg.parents_.push_back(parent);
    }
    // memory.use_hierarchy must be on so limits of the parent hold for children (default on new kernels).
    if (inits_apart) {
      cg.inits_ = cg.parents_[0] + "/" + kInits;
      BH_TRY(MakeDir(cg.inits_));
      cg.inits_count_ = std::make_unique<InitsCount>();
      // The sandboxes a daemon before this one left running (it adopts them). Lowered below
      // what their inits hold, the limit may be refused: it is sized again at the next change.
      if (Status sized = cg.SizeInits(static_cast<int>(cg.List().size())); !sized.ok())
        spdlog::warn("sizing {}: {}", cg.inits_, sized.error().message);
    }
  }
  return cg;
}

std::vector<std::string> Cgroups::Paths(const std::string& id) const {
  std::vector<std::string> out;
  for (const auto& p : parents_) out.push_back(p + "/" + id);
  return out;
}

Status Cgroups::Create(const std::string& id, const Limits& limits) {
  auto paths = Paths(id);
  BH_TRY(MakeDir(paths[0]));
  if (!inits_.empty()) BH_TRY(SizeInits(+1));  // (Destroy takes it back)
  for (const auto& p : paths) BH_TRY(MakeDir(p));
  if (v2_ && inits_apart_) {
    // A daemon killed between InitStarted and a Destroy left the controller on: init must
    // be able to enter the group again.
    (void)WriteFile(paths[0] + "/cgroup.subtree_control", "-memory");
    BH_TRY(MakeDir(paths[0] + "/" + kInitLeaf));
    BH_TRY(MakeDir(paths[0] + "/" + kWorkload));
  }
  return SetLimits(id, limits);
}

Status Cgroups::SetBackground(const std::string& id, bool background) {
  if (v2_) return WriteFile(Paths(id)[0] + "/cpu.weight", background ? "1" : "100");
  return WriteFile(parents_[2] + "/" + id + "/cpu.shares", background ? "2" : "1024");
}

Status Cgroups::SetLimits(const std::string& id, const Limits& limits) {
  int64_t mem = limits.memory_mb * 1024 * 1024;
  int64_t period = 100000;
  int64_t quota = static_cast<int64_t>(std::llround(limits.cpus * period));
  // The memory dir, and its workload group (absent in a sandbox an older daemon started).
  const std::string memory = Paths(id)[0], workload = memory + "/" + kWorkload;
  const std::string limit_file = v2_ ? "/memory.max" : "/memory.limit_in_bytes";
  auto set_memory = [&](const std::string& dir, int64_t bytes) {
    return v2_ ? WriteFile(dir + limit_file, std::to_string(bytes)) : SetV1Memory(dir, bytes);
  };
  auto set_workload = [&]() -> Status {
    return Exists(workload + limit_file) ? set_memory(workload, WorkloadBytes(mem)) : Status();
  };
  // Lowering: the workload group first, so that is where the kernel reclaims.
  const bool lowering = mem < ReadInt(memory + limit_file);
  if (lowering) BH_TRY(set_workload());
  BH_TRY(set_memory(memory, mem));
  if (!lowering) BH_TRY(set_workload());
  if (v2_) {
    // No swap: memory.max then bounds memory and swap together.
    if (Exists(memory + "/memory.swap.max")) BH_TRY(WriteFile(memory + "/memory.swap.max", "0"));
    BH_TRY(WriteFile(memory + "/pids.max", std::to_string(limits.pids)));
    BH_TRY(WriteFile(memory + "/cpu.max", std::to_string(quota) + " " + std::to_string(period)));
    return {};
  }
  // Writing the TCP limit is what turns TCP accounting on for a v1 group, and a socket is
  // charged to its creator's group: the workload's, below the sandbox's.
  for (const std::string& dir : {memory, workload}) {
    if (Exists(dir + "/memory.kmem.tcp.limit_in_bytes"))
      BH_TRY(WriteFile(dir + "/memory.kmem.tcp.limit_in_bytes", std::to_string(TcpBufferBytes(mem))));
  }
  std::string pids = parents_[1] + "/" + id, cpu = parents_[2] + "/" + id;
  BH_TRY(WriteFile(pids + "/pids.max", std::to_string(limits.pids)));
  BH_TRY(WriteFile(cpu + "/cpu.cfs_period_us", std::to_string(period)));
  BH_TRY(WriteFile(cpu + "/cpu.cfs_quota_us", std::to_string(quota)));
  return {};
}

Result<Cgroups::JoinFds> Cgroups::OpenJoinFds(const std::string& id) {
  JoinFds fds;
  const auto paths = Paths(id);
  for (const auto& p : paths) {
    auto fd = OpenProcs(p);
    if (!fd) return fd.error();
    fds.sandbox.push_back(std::move(*fd));
  }
  if (!inits_apart_) return fds;
  auto init = OpenProcs(v2_ ? paths[0] + "/" + kInitLeaf : inits_);
  if (!init) return init.error();
  fds.init = std::move(*init);
  auto workload = OpenProcs(v2_ ? paths[0] + "/" + kWorkload : paths[0]);
  if (!workload) return workload.error();
  fds.workload = std::move(*workload);
  return fds;
}

Status Cgroups::SizeInits(int change) {
  std::lock_guard lock(inits_count_->mu);
  inits_count_->groups = std::max<int64_t>(0, inits_count_->groups + change);
  // (Lowered, the kernel reclaims down to it first; a write it refuses is tried again at the next change.)
  return SetV1Memory(inits_, std::max<int64_t>(1, inits_count_->groups) * kInitReserve);
}

Status Cgroups::InitStarted(const std::string& id, const Limits& limits) {
  if (!v2_) return {};
  const std::string dir = Paths(id)[0];
  BH_TRY(WriteFile(dir + "/cgroup.subtree_control", "+memory"));
  return WriteFile(dir + "/" + kWorkload + "/memory.max", std::to_string(WorkloadBytes(limits.memory_mb * 1024 * 1024)));
}

Result<Usage> Cgroups::Usage(const std::string& id) {
  runtime::Usage u;
  if (v2_) {
    std::string dir = Paths(id)[0];
    if (!Exists(dir)) return MakeError(ErrorCode::kNotFound, "no cgroup for " + id);
    u.memory_bytes = ReadInt(dir + "/memory.current");
    u.pids = ReadInt(dir + "/pids.current");
    std::istringstream in(ReadFile(dir + "/cpu.stat"));
    std::string key;
    int64_t val;
    while (in >> key >> val)
      if (key == "usage_usec") u.cpu_s = val / 1e6;
    return u;
  }
  std::string memory = parents_[0] + "/" + id;
  if (!Exists(memory)) return MakeError(ErrorCode::kNotFound, "no cgroup for " + id);
  u.memory_bytes = ReadInt(memory + "/memory.usage_in_bytes");
  u.pids = ReadInt(parents_[1] + "/" + id + "/pids.current");
  u.cpu_s = ReadInt(parents_[3] + "/" + id + "/cpuacct.usage") / 1e9;
  return u;
}

Result<UniqueFd> Cgroups::OomEvents(const std::string& id, int64_t limit_bytes) {
  const std::string dir = Paths(id)[0];
  if (v2_) {
    BH_TRY(WriteFile(dir + "/memory.high", std::to_string(limit_bytes)));
    UniqueFd events(::open((dir + "/memory.events").c_str(), O_RDONLY | O_CLOEXEC));
    if (!events) return SystemError("open " + dir + "/memory.events", errno);
    return events;
  }
  BH_TRY(WriteFile(dir + "/memory.oom_control", "1"));
  UniqueFd control(::open((dir + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC));
  if (!control) return SystemError("open " + dir + "/memory.oom_control", errno);
  UniqueFd event(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event) return SystemError("eventfd", errno);
  BH_TRY(WriteFile(dir + "/cgroup.event_control", std::to_string(event.get()) + " " + std::to_string(control.get())));
  return event;
}

bool Cgroups::OutOfMemory(const std::string& id) {
  const std::string dir = Paths(id)[0];
  if (v2_) {
    const std::string high = ReadFile(dir + "/memory.high");
    return high.rfind("max", 0) != 0 && ReadInt(dir + "/memory.current") > ReadInt(dir + "/memory.high");
  }
  return ReadFile(dir + "/memory.oom_control").find("under_oom 1") != std::string::npos;
}

Status Cgroups::SetMemoryBytes(const std::string& id, int64_t bytes) {
  if (v2_) return WriteFile(Paths(id)[0] + "/memory.max", std::to_string(bytes));
  return SetV1Memory(Paths(id)[0], bytes);
}

Status Cgroups::EnableOomKiller(const std::string& id) {
  if (v2_) return {};
  return WriteFile(Paths(id)[0] + "/memory.oom_control", "0");
}

Status Cgroups::SetFrozen(const std::string& id, bool frozen) {
  // v1: freezer.state FROZEN/THAWED, reads FREEZING until every task stopped; v2:
  // cgroup.freeze 1/0, and cgroup.events says "frozen 1" once done.
  std::string dir = v2_ ? Paths(id)[0] : parents_[kV1Freezer] + "/" + id;
  if (!Exists(dir)) return MakeError(ErrorCode::kNotFound, "no cgroup for sandbox " + id);
  const std::string file = dir + (v2_ ? "/cgroup.freeze" : "/freezer.state");
  const std::string value = v2_ ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int attempt = 0;; ++attempt) {
    // The v1 freezer only catches the tasks that are freezable at the moment of the write
    // (one busy in a syscall or forking is skipped): each write tries again, and now and then a
    // thaw and a fresh freeze get a group unstuck (what runc does too).
    if (!v2_ && frozen && attempt % 50 == 49) {
      (void)WriteFile(file, "THAWED");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (attempt == 0 || !v2_) BH_TRY(WriteFile(file, value));
    if (Frozen(id) == frozen) return {};
    if (std::chrono::steady_clock::now() > deadline) {
      if (frozen) (void)WriteFile(file, v2_ ? "0" : "THAWED");  // never leave it half-frozen
      return MakeError(ErrorCode::kUnavailable, std::string("sandbox ") + id + " did not " +
                                                    (frozen ? "freeze" : "thaw") + " within 5 s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(attempt < 20 ? 100 : 1000));
  }
}

bool Cgroups::Frozen(const std::string& id) const {
  if (v2_) return ReadFile(Paths(id)[0] + "/cgroup.events").find("frozen 1") != std::string::npos;
  return ReadFile(parents_[kV1Freezer] + "/" + id + "/freezer.state").rfind("FROZEN", 0) == 0;
}

Status Cgroups::Destroy(const std::string& id) {
  auto paths = Paths(id);
  // Frozen tasks do not die until thawed (v1; v2's cgroup.kill handles frozen groups).
  if (!v2_ && Exists(parents_[kV1Freezer] + "/" + id)) (void)WriteFile(parents_[kV1Freezer] + "/" + id + "/freezer.state", "THAWED");
  if (v2_ && Exists(paths[0] + "/cgroup.kill")) (void)WriteFile(paths[0] + "/cgroup.kill", "1");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  // rmdir first: the groups of a sandbox whose init is gone are empty, and every lookup in a
  // cgroup hierarchy of thousands of groups contends with the kernel's own work on them.
  std::vector<std::string> dirs;
  if (v2_ && inits_apart_) dirs = {paths[0] + "/" + kWorkload, paths[0] + "/" + kInitLeaf};
  dirs.insert(dirs.end(), paths.begin(), paths.end());
  for (const auto& dir : dirs) {
    for (;;) {
      if (::rmdir(dir.c_str()) == 0) {
        if (dir == paths[0] && !inits_.empty()) (void)SizeInits(-1);
        break;
      }
      if (errno == ENOENT) break;
      if (errno != EBUSY) return SystemError("rmdir " + dir, errno);
      // A group goes only after its children (those of a sandbox a daemon before .inits
      // started on v1). Killing pid 1 of the sandbox ends its pid namespace; this
      // catches anything that lingers (a process that joined the group but not the namespace).
      for (const char* child : {kWorkload, kInitLeaf}) {
        const std::string below = dir + "/" + child;
        for (pid_t pid : Procs(below)) ::kill(pid, SIGKILL);
        (void)::rmdir(below.c_str());
      }
      for (pid_t pid : Procs(dir)) ::kill(pid, SIGKILL);
      if (std::chrono::steady_clock::now() > deadline)
        return MakeError(ErrorCode::kInternal, "cgroup " + dir + " did not empty");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return {};
}

Status Cgroups::Rename(const std::string& from, const std::string& to) {
  for (const auto& parent : parents_) {
    const std::string old_path = parent + "/" + from;
    if (Exists(old_path) && ::rename(old_path.c_str(), (parent + "/" + to).c_str()) != 0)
      return SystemError("rename " + old_path, errno);
  }
  return {};
}

void Cgroups::RemoveParentsIfEmpty() {
  if (!List().empty()) return;
  if (!inits_.empty()) ::rmdir(inits_.c_str());
  for (const auto& p : parents_) ::rmdir(p.c_str());
}

std::vector<std::string> Cgroups::List() {
  std::vector<std::string> ids;
  DIR* d = ::opendir(parents_[0].c_str());
  if (!d) return ids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') ids.emplace_back(e->d_name);
  }
  ::closedir(d);
  return ids;
}

}  // namespace bulkhead::runtime
