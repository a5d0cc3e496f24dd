#include "oci/container_cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/read_file.h"
#include "oci/ceiling.h"

namespace bulkhead::oci {
namespace {

constexpr const char* kCgroupRoot = "/sys/fs/cgroup";
constexpr long kCgroup2Magic = 0x63677270;

bool IsV2() {
  struct statfs fs {};
  return ::statfs(kCgroupRoot, &fs) == 0 && static_cast<long>(fs.f_type) == kCgroup2Magic;
}

// The v1 hierarchies mounted under /sys/fs/cgroup (their mount dirs: "memory", "cpu,cpuacct", ...),
// from this process's mount table.
std::vector<std::string> V1Hierarchies() {
  std::vector<std::string> out;
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point, rest;
    fields >> id >> parent >> dev >> root >> mount_point;
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    const std::string prefix = std::string(kCgroupRoot) + "/";
    if (fstype == "cgroup" && mount_point.rfind(prefix, 0) == 0) out.push_back(mount_point);
  }
  return out;
}


bool HasController(const std::string& dir, const std::string& controller) {
  // the v1 hierarchy's mount dir, e.g. /sys/fs/cgroup/cpu,cpuacct/kubepods/...
  std::string rest = dir.substr(std::string(kCgroupRoot).size() + 1);
  std::string hierarchy = rest.substr(0, rest.find('/'));
  std::istringstream names(hierarchy);
  std::string name;
  while (std::getline(names, name, ','))
    if (name == controller) return true;
  return false;
}

Status Write(const std::string& dir, const std::string& file, const std::string& value) {
  return WriteSmallFile(dir + "/" + file, value);
}

// mkdir -p, and on a v1 cpuset hierarchy each new level gets its parent's cpus and mems (a
// group without them takes no process).
Status MakeGroup(const std::string& dir, bool cpuset) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno == EEXIST) return {};
    if (errno != ENOENT) return SystemError("mkdir " + dir, errno);
    BH_TRY(MakeGroup(dir.substr(0, dir.rfind('/')), cpuset));
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return SystemError("mkdir " + dir, errno);
  }
  if (cpuset) {
    const std::string parent = dir.substr(0, dir.rfind('/'));
    for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
      auto value = ReadSmallFile(parent + "/" + file);
      if (value && !value->empty() && *value != "\n") BH_TRY(Write(dir, file, *value));
    }
  }
  return {};
}

}  // namespace

Result<std::string> SystemdCgroupPath(const std::string& spec_path) {
  std::istringstream parts(spec_path);
  std::string slice, prefix, name;
  std::getline(parts, slice, ':');
  std::getline(parts, prefix, ':');
  std::getline(parts, name, ':');
  if (name.empty() || slice.find('/') != std::string::npos || prefix.find('/') != std::string::npos ||
      name.find('/') != std::string::npos)
    return MakeError(ErrorCode::kInvalid, "cgroupsPath \"" + spec_path + "\" is not systemd's slice:prefix:name");
  std::string path;
  if (slice.empty() || slice == "-.slice") slice = "system.slice";
  const std::string stem = slice.substr(0, slice.size() - (slice.size() > 6 && slice.ends_with(".slice") ? 6 : 0));
  // "a-b-c.slice" lives in a.slice/a-b.slice/a-b-c.slice
  for (size_t dash = stem.find('-'); dash != std::string::npos; dash = stem.find('-', dash + 1))
    path += "/" + stem.substr(0, dash) + ".slice";
  path += "/" + stem + ".slice";
  path += "/" + (prefix.empty() ? name : prefix + "-" + name) + (name.ends_with(".slice") ? "" : ".scope");
  return path;
}

Result<ContainerCgroup> ContainerCgroup::Resolve(const std::string& path, const std::string& id, bool systemd_form) {
  std::string relative = path;
  if (systemd_form && !relative.empty()) {
    auto converted = SystemdCgroupPath(relative);
    if (!converted.ok()) return converted.error();
    relative = *converted;
  }
  if (relative.empty()) relative = "/bulkhead-oci/" + id;
  if (relative[0] != '/') relative = "/" + relative;
  for (size_t at = 0; at != std::string::npos; at = relative.find('/', at + 1)) {
    std::string component = relative.substr(at + 1, relative.find('/', at + 1) - at - 1);
    if (component == ".." || component == ".")
      return MakeError(ErrorCode::kInvalid, "cgroupsPath \"" + path + "\" climbs out of the cgroup tree");
  }
  ContainerCgroup group;
  group.v2_ = IsV2();
  if (group.v2_) {
    group.dirs_.push_back(kCgroupRoot + relative);
  } else {
    for (const std::string& hierarchy : V1Hierarchies()) group.dirs_.push_back(hierarchy + relative);
    if (group.dirs_.empty()) return MakeError(ErrorCode::kUnavailable, "no cgroup hierarchy is mounted under /sys/fs/cgroup");
  }
  return group;
}

ContainerCgroup ContainerCgroup::FromDirs(std::vector<std::string> dirs, bool v2) {
  ContainerCgroup group;
  group.dirs_ = std::move(dirs);
  group.v2_ = v2;
  return group;
}

Status ContainerCgroup::Create(const Resources& resources) const {
  for (const std::string& dir : dirs_) {
    BH_TRY(MakeGroup(dir, !v2_ && HasController(dir, "cpuset")));
    if (v2_) {
      // The controllers the limits need, passed down from the root to the group's parent.
      for (size_t at = std::string(kCgroupRoot).size(); at != std::string::npos && at < dir.size();
           at = dir.find('/', at + 1))
        (void)Write(dir.substr(0, at), "cgroup.subtree_control", "+cpu +memory +pids");
    } else if (HasController(dir, "devices")) {
      // The default devices alone, the pty ones too (/dev/ptmx, /dev/pts/*).
      BH_TRY(Write(dir, "devices.deny", "a"));
      for (const DefaultDevice& device : kDefaultDevices)
        BH_TRY(Write(dir, "devices.allow", "c " + std::to_string(device.major) + ":" + std::to_string(device.minor) + " rwm"));
      for (const char* rule : {"c 5:2 rwm", "c 136:* rwm"}) BH_TRY(Write(dir, "devices.allow", rule));
    }
  }
  Resources limits = resources;
  if (!limits.pids_limit) limits.pids_limit = kDefaultPidsLimit;
  return Apply(limits);
}

Status ContainerCgroup::Apply(const Resources& r) const {
  const std::string pids = r.pids_limit && *r.pids_limit > 0 ? std::to_string(*r.pids_limit) : "max";
  if (v2_) {
    const std::string& dir = dirs_[0];
    if (r.memory_limit && *r.memory_limit > 0) BH_TRY(Write(dir, "memory.max", std::to_string(*r.memory_limit)));
    if (r.memory_swap && r.memory_limit && *r.memory_swap >= *r.memory_limit)
      (void)Write(dir, "memory.swap.max", std::to_string(*r.memory_swap - *r.memory_limit));
    if (r.cpu_shares && *r.cpu_shares >= 2)
      BH_TRY(Write(dir, "cpu.weight", std::to_string(1 + ((*r.cpu_shares - 2) * 9999) / 262142)));
    if (r.cpu_quota && *r.cpu_quota > 0)
      BH_TRY(Write(dir, "cpu.max", std::to_string(*r.cpu_quota) + " " + std::to_string(r.cpu_period.value_or(100000))));
    if (r.pids_limit) BH_TRY(Write(dir, "pids.max", pids));
    return {};
  }
  for (const std::string& dir : dirs_) {
    if (HasController(dir, "memory")) {
      if (r.memory_limit && *r.memory_limit > 0) BH_TRY(Write(dir, "memory.limit_in_bytes", std::to_string(*r.memory_limit)));
      if (r.memory_swap && *r.memory_swap > 0) (void)Write(dir, "memory.memsw.limit_in_bytes", std::to_string(*r.memory_swap));
    }
    if (HasController(dir, "cpu")) {
      if (r.cpu_shares) BH_TRY(Write(dir, "cpu.shares", std::to_string(*r.cpu_shares)));
      if (r.cpu_period) BH_TRY(Write(dir, "cpu.cfs_period_us", std::to_string(*r.cpu_period)));
      if (r.cpu_quota) BH_TRY(Write(dir, "cpu.cfs_quota_us", std::to_string(*r.cpu_quota)));
    }
    if (HasController(dir, "cpuset")) {
      if (!r.cpuset_cpus.empty()) BH_TRY(Write(dir, "cpuset.cpus", r.cpuset_cpus));
      if (!r.cpuset_mems.empty()) BH_TRY(Write(dir, "cpuset.mems", r.cpuset_mems));
    }
    if (HasController(dir, "pids") && r.pids_limit) BH_TRY(Write(dir, "pids.max", pids));
  }
  return {};
}

Status ContainerCgroup::Join(pid_t pid) const {
  for (const std::string& dir : dirs_) BH_TRY(Write(dir, "cgroup.procs", std::to_string(pid)));
  return {};
}

Status ContainerCgroup::SetFrozen(bool frozen) const {
  std::string dir, file, value;
  if (v2_) {
    dir = dirs_[0], file = "cgroup.freeze", value = frozen ? "1" : "0";
  } else {
    for (const std::string& d : dirs_)
      if (HasController(d, "freezer")) dir = d;
    if (dir.empty()) return MakeError(ErrorCode::kUnavailable, "no freezer cgroup hierarchy is mounted");
    file = "freezer.state", value = frozen ? "FROZEN" : "THAWED";
  }
  BH_TRY(Write(dir, file, value));
  for (int i = 0; i < 500; i++) {
    if (Frozen() == frozen) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return MakeError(ErrorCode::kUnavailable, std::string("the container's processes did not ") + (frozen ? "freeze" : "thaw"));
}

bool ContainerCgroup::Frozen() const {
  if (v2_) {
    auto events = ReadSmallFile(dirs_[0] + "/cgroup.events");
    return events && events->find("frozen 1") != std::string::npos;
  }
  for (const std::string& dir : dirs_) {
    if (!HasController(dir, "freezer")) continue;
    auto state = ReadSmallFile(dir + "/freezer.state");
    return state && state->rfind("FROZEN", 0) == 0;
  }
  return false;
}

std::vector<pid_t> ContainerCgroup::Pids() const {
  std::vector<pid_t> out;
  std::string dir = dirs_.empty() ? "" : dirs_[0];
  for (const std::string& d : dirs_)
    if (!v2_ && HasController(d, "pids")) dir = d;
  std::ifstream procs(dir + "/cgroup.procs");
  pid_t pid;
  while (procs >> pid) out.push_back(pid);
  return out;
}

Status ContainerCgroup::Remove() const {
  if (Frozen()) (void)SetFrozen(false);
  for (int i = 0; i < 200; i++) {
    auto pids = Pids();
    if (pids.empty()) break;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const std::string& dir : dirs_) {
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return SystemError("rmdir " + dir, errno);
  }
  return {};
}

}  // namespace bulkhead::oci
