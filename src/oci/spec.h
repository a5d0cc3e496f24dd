// The parts of an OCI runtime spec (config.json, runtime-spec 1.x) that bulkhead-oci runs:
// what containerd writes for a CRI pod sandbox or container, or `ctr run` for a plain one.
// Parsing only checks shapes and ranges; what the runtime refuses or overrides (the user
// namespace, seccomp, capabilities beyond the sandbox's set) is the runtime's call (README).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::oci {

struct Rlimit {
  int resource = 0;  // RLIMIT_*
  uint64_t soft = 0, hard = 0;
};

// A capability set as a bit mask (bit n = capability n).
struct CapabilitySets {
  uint64_t bounding = 0, effective = 0, permitted = 0, inheritable = 0, ambient = 0;
};

struct Process {
  bool terminal = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> additional_gids;
  std::optional<mode_t> umask;
  std::vector<std::string> args, env;
  std::string cwd = "/";
  std::vector<Rlimit> rlimits;
  CapabilitySets capabilities;
  std::optional<int> oom_score_adj;
};

struct Mount {
  std::string destination, type, source;
  std::vector<std::string> options;
};

struct Namespace {
  std::string type;  // pid network mount ipc uts user cgroup time
  std::string path;  // join this one instead of making a new one
};

struct Device {
  char type = 'c';  // c, b, p (u is c)
  int64_t major = 0, minor = 0;
  std::string path;
  mode_t mode = 0666;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Resources {
  std::optional<int64_t> memory_limit, memory_swap, cpu_quota, pids_limit;
  std::optional<uint64_t> cpu_shares, cpu_period;
  std::string cpuset_cpus, cpuset_mems;
};

struct Spec {
  Process process;
  std::string root_path;  // relative to the bundle, or absolute
  bool root_readonly = false;
  std::string hostname;
  std::vector<Mount> mounts;
  std::vector<Namespace> namespaces;
  std::vector<Device> devices;
  Resources resources;
  std::string cgroups_path;
  std::vector<std::string> masked_paths, readonly_paths;
  std::map<std::string, std::string> annotations, sysctl;

  // The namespace of `type` the spec names, if any.
  const Namespace* FindNamespace(const std::string& type) const;
};

Result<Spec> ParseSpec(const nlohmann::json& config);
Result<Process> ParseProcess(const nlohmann::json& process);
// linux.resources (also what `update --resources` reads).
Result<Resources> ParseResources(const nlohmann::json& resources);
// "CAP_SYS_ADMIN" -> 21, "RLIMIT_NOFILE" -> 7; -1 when unknown.
int CapabilityNumber(const std::string& name);
std::string CapabilityName(int number);  // "CAP_SYS_ADMIN", or "capability <n>" past the known ones
int RlimitNumber(const std::string& name);

}  // namespace bulkhead::oci
