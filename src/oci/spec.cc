#include "oci/spec.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <utility>

namespace bulkhead::oci {
namespace {

using nlohmann::json;

constexpr std::array<const char*, 41> kCapabilityNames = {
    "CAP_CHOWN",           "CAP_DAC_OVERRIDE",   "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
    "CAP_FSETID",          "CAP_KILL",           "CAP_SETGID",          "CAP_SETUID",
    "CAP_SETPCAP",         "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",       "CAP_NET_RAW",        "CAP_IPC_LOCK",        "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",      "CAP_SYS_RAWIO",      "CAP_SYS_CHROOT",      "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",       "CAP_SYS_ADMIN",      "CAP_SYS_BOOT",        "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",    "CAP_SYS_TIME",       "CAP_SYS_TTY_CONFIG",  "CAP_MKNOD",
    "CAP_LEASE",           "CAP_AUDIT_WRITE",    "CAP_AUDIT_CONTROL",   "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",    "CAP_MAC_ADMIN",      "CAP_SYSLOG",          "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",   "CAP_AUDIT_READ",     "CAP_PERFMON",         "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE"};

constexpr std::pair<const char*, int> kRlimits[] = {
    {"RLIMIT_CPU", RLIMIT_CPU},         {"RLIMIT_FSIZE", RLIMIT_FSIZE},     {"RLIMIT_DATA", RLIMIT_DATA},
    {"RLIMIT_STACK", RLIMIT_STACK},     {"RLIMIT_CORE", RLIMIT_CORE},       {"RLIMIT_RSS", RLIMIT_RSS},
    {"RLIMIT_NPROC", RLIMIT_NPROC},     {"RLIMIT_NOFILE", RLIMIT_NOFILE},   {"RLIMIT_MEMLOCK", RLIMIT_MEMLOCK},
    {"RLIMIT_AS", RLIMIT_AS},           {"RLIMIT_LOCKS", RLIMIT_LOCKS},     {"RLIMIT_SIGPENDING", RLIMIT_SIGPENDING},
    {"RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE}, {"RLIMIT_NICE", RLIMIT_NICE},     {"RLIMIT_RTPRIO", RLIMIT_RTPRIO},
    {"RLIMIT_RTTIME", RLIMIT_RTTIME}};

Error Invalid(const std::string& what) { return MakeError(ErrorCode::kInvalid, "config.json: " + what); }

// The value at `key` of `object` as T, or `fallback` when absent or null; a wrong type is an error.
template <typename T>
Result<T> Get(const json& object, const char* key, T fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return Invalid(std::string("\"") + key + "\" has the wrong type");
  }
}

template <typename T>
Result<std::optional<T>> GetOptional(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<T>{};
  try {
    return std::optional<T>(it->get<T>());
  } catch (const json::exception&) {
    return Invalid(std::string("\"") + key + "\" has the wrong type");
  }
}

Result<uint64_t> CapabilityMask(const json& names, const char* set) {
  if (names.is_null()) return uint64_t{0};
  if (!names.is_array()) return Invalid(std::string("capabilities.") + set + " is not a list");
  uint64_t mask = 0;
  for (const json& name : names) {
    int number = name.is_string() ? CapabilityNumber(name.get<std::string>()) : -1;
    if (number < 0) return Invalid(std::string("capabilities.") + set + " names an unknown capability " + name.dump());
    mask |= uint64_t{1} << number;
  }
  return mask;
}

#define ASSIGN(target, expr)               \
  do {                                     \
    auto assign_ = (expr);                 \
    if (!assign_.ok()) return assign_.error(); \
    target = std::move(*assign_);          \
  } while (0)

}  // namespace

Result<Resources> ParseResources(const json& resources) {
  Resources out;
  if (resources.is_null()) return out;
  if (!resources.is_object()) return Invalid("linux.resources is not an object");
  if (auto memory = resources.find("memory"); memory != resources.end() && memory->is_object()) {
    ASSIGN(out.memory_limit, GetOptional<int64_t>(*memory, "limit"));
    ASSIGN(out.memory_swap, GetOptional<int64_t>(*memory, "swap"));
  }
  if (auto cpu = resources.find("cpu"); cpu != resources.end() && cpu->is_object()) {
    ASSIGN(out.cpu_shares, GetOptional<uint64_t>(*cpu, "shares"));
    ASSIGN(out.cpu_quota, GetOptional<int64_t>(*cpu, "quota"));
    ASSIGN(out.cpu_period, GetOptional<uint64_t>(*cpu, "period"));
    ASSIGN(out.cpuset_cpus, Get<std::string>(*cpu, "cpus", ""));
    ASSIGN(out.cpuset_mems, Get<std::string>(*cpu, "mems", ""));
  }
  if (auto pids = resources.find("pids"); pids != resources.end() && pids->is_object()) {
    ASSIGN(out.pids_limit, GetOptional<int64_t>(*pids, "limit"));
  }
  return out;
}

namespace {
bool IsAbsolute(const std::string& path) { return !path.empty() && path[0] == '/'; }
}  // namespace

int CapabilityNumber(const std::string& name) {
  for (size_t i = 0; i < kCapabilityNames.size(); i++)
    if (name == kCapabilityNames[i]) return static_cast<int>(i);
  return -1;
}

std::string CapabilityName(int number) {
  if (number >= 0 && number < static_cast<int>(kCapabilityNames.size())) return kCapabilityNames[number];
  return "capability " + std::to_string(number);
}

int RlimitNumber(const std::string& name) {
  for (const auto& [rlimit_name, number] : kRlimits)
    if (name == rlimit_name) return number;
  return -1;
}

const Namespace* Spec::FindNamespace(const std::string& type) const {
  for (const Namespace& ns : namespaces)
    if (ns.type == type) return &ns;
  return nullptr;
}

Result<Process> ParseProcess(const json& process) {
  if (!process.is_object()) return Invalid("process is not an object");
  Process out;
  ASSIGN(out.terminal, Get<bool>(process, "terminal", false));
  ASSIGN(out.args, Get<std::vector<std::string>>(process, "args", {}));
  if (out.args.empty() || out.args[0].empty()) return Invalid("process.args is empty");
  ASSIGN(out.env, Get<std::vector<std::string>>(process, "env", {}));
  ASSIGN(out.cwd, Get<std::string>(process, "cwd", "/"));
  if (!IsAbsolute(out.cwd)) return Invalid("process.cwd is not an absolute path");
  ASSIGN(out.oom_score_adj, GetOptional<int>(process, "oomScoreAdj"));
  if (out.oom_score_adj && (*out.oom_score_adj < -1000 || *out.oom_score_adj > 1000))
    return Invalid("process.oomScoreAdj is outside -1000..1000");
  if (auto user = process.find("user"); user != process.end() && user->is_object()) {
    ASSIGN(out.uid, Get<uid_t>(*user, "uid", 0));
    ASSIGN(out.gid, Get<gid_t>(*user, "gid", 0));
    ASSIGN(out.additional_gids, Get<std::vector<gid_t>>(*user, "additionalGids", {}));
    ASSIGN(out.umask, GetOptional<mode_t>(*user, "umask"));
    if (out.umask && *out.umask > 0777) return Invalid("process.user.umask is not a mode");
  }
  if (auto caps = process.find("capabilities"); caps != process.end() && caps->is_object()) {
    ASSIGN(out.capabilities.bounding, CapabilityMask(caps->value("bounding", json()), "bounding"));
    ASSIGN(out.capabilities.effective, CapabilityMask(caps->value("effective", json()), "effective"));
    ASSIGN(out.capabilities.permitted, CapabilityMask(caps->value("permitted", json()), "permitted"));
    ASSIGN(out.capabilities.inheritable, CapabilityMask(caps->value("inheritable", json()), "inheritable"));
    ASSIGN(out.capabilities.ambient, CapabilityMask(caps->value("ambient", json()), "ambient"));
  }
  if (auto rlimits = process.find("rlimits"); rlimits != process.end() && !rlimits->is_null()) {
    if (!rlimits->is_array()) return Invalid("process.rlimits is not a list");
    for (const json& rlimit : *rlimits) {
      if (!rlimit.is_object()) return Invalid("process.rlimits holds a non-object");
      Rlimit limit;
      std::string type;
      ASSIGN(type, Get<std::string>(rlimit, "type", ""));
      limit.resource = RlimitNumber(type);
      if (limit.resource < 0) return Invalid("process.rlimits names an unknown limit \"" + type + "\"");
      ASSIGN(limit.soft, Get<uint64_t>(rlimit, "soft", 0));
      ASSIGN(limit.hard, Get<uint64_t>(rlimit, "hard", 0));
      if (limit.soft > limit.hard) return Invalid("process.rlimits " + type + ": soft is above hard");
      out.rlimits.push_back(limit);
    }
  }
  return out;
}

Result<Spec> ParseSpec(const json& config) {
  if (!config.is_object()) return Invalid("not a JSON object");
  Spec spec;
  auto process = config.find("process");
  if (process == config.end()) return Invalid("no process");
  ASSIGN(spec.process, ParseProcess(*process));
  auto root = config.find("root");
  if (root == config.end() || !root->is_object()) return Invalid("no root");
  ASSIGN(spec.root_path, Get<std::string>(*root, "path", ""));
  if (spec.root_path.empty()) return Invalid("root.path is empty");
  ASSIGN(spec.root_readonly, Get<bool>(*root, "readonly", false));
  ASSIGN(spec.hostname, Get<std::string>(config, "hostname", ""));
  ASSIGN(spec.annotations, (Get<std::map<std::string, std::string>>(config, "annotations", {})));
  if (auto mounts = config.find("mounts"); mounts != config.end() && !mounts->is_null()) {
    if (!mounts->is_array()) return Invalid("mounts is not a list");
    for (const json& m : *mounts) {
      if (!m.is_object()) return Invalid("mounts holds a non-object");
      Mount mount;
      ASSIGN(mount.destination, Get<std::string>(m, "destination", ""));
      if (!IsAbsolute(mount.destination)) return Invalid("a mount's destination is not an absolute path");
      ASSIGN(mount.type, Get<std::string>(m, "type", ""));
      ASSIGN(mount.source, Get<std::string>(m, "source", ""));
      ASSIGN(mount.options, Get<std::vector<std::string>>(m, "options", {}));
      bool bind = std::find(mount.options.begin(), mount.options.end(), "bind") != mount.options.end() ||
                  std::find(mount.options.begin(), mount.options.end(), "rbind") != mount.options.end();
      if (mount.type.empty() || bind) mount.type = bind ? "bind" : mount.type;
      if (mount.type.empty()) return Invalid("the mount at " + mount.destination + " has no type");
      spec.mounts.push_back(std::move(mount));
    }
  }
  auto linux_section = config.find("linux");
  if (linux_section == config.end() || !linux_section->is_object()) return Invalid("no linux section");
  if (auto namespaces = linux_section->find("namespaces"); namespaces != linux_section->end() && !namespaces->is_null()) {
    if (!namespaces->is_array()) return Invalid("linux.namespaces is not a list");
    for (const json& n : *namespaces) {
      if (!n.is_object()) return Invalid("linux.namespaces holds a non-object");
      Namespace ns;
      ASSIGN(ns.type, Get<std::string>(n, "type", ""));
      ASSIGN(ns.path, Get<std::string>(n, "path", ""));
      static constexpr const char* kTypes[] = {"pid", "network", "mount", "ipc", "uts", "user", "cgroup", "time"};
      if (std::find(std::begin(kTypes), std::end(kTypes), ns.type) == std::end(kTypes))
        return Invalid("linux.namespaces names an unknown type \"" + ns.type + "\"");
      if (!ns.path.empty() && !IsAbsolute(ns.path)) return Invalid("the " + ns.type + " namespace path is not absolute");
      if (spec.FindNamespace(ns.type)) return Invalid("linux.namespaces names " + ns.type + " twice");
      spec.namespaces.push_back(std::move(ns));
    }
  }
  if (auto devices = linux_section->find("devices"); devices != linux_section->end() && !devices->is_null()) {
    if (!devices->is_array()) return Invalid("linux.devices is not a list");
    for (const json& d : *devices) {
      if (!d.is_object()) return Invalid("linux.devices holds a non-object");
      Device device;
      std::string type;
      ASSIGN(type, Get<std::string>(d, "type", "c"));
      if (type != "c" && type != "u" && type != "b" && type != "p") return Invalid("a device's type is not c, u, b or p");
      device.type = type == "u" ? 'c' : type[0];
      ASSIGN(device.path, Get<std::string>(d, "path", ""));
      if (!IsAbsolute(device.path)) return Invalid("a device's path is not absolute");
      ASSIGN(device.major, Get<int64_t>(d, "major", 0));
      ASSIGN(device.minor, Get<int64_t>(d, "minor", 0));
      if (device.major < 0 || device.major > 4095 || device.minor < 0 || device.minor > 1048575)
        return Invalid("device " + device.path + " has an impossible number");
      ASSIGN(device.mode, Get<mode_t>(d, "fileMode", 0666));
      ASSIGN(device.uid, Get<uid_t>(d, "uid", 0));
      ASSIGN(device.gid, Get<gid_t>(d, "gid", 0));
      spec.devices.push_back(std::move(device));
    }
  }
  ASSIGN(spec.resources, ParseResources(linux_section->value("resources", json())));
  ASSIGN(spec.cgroups_path, Get<std::string>(*linux_section, "cgroupsPath", ""));
  ASSIGN(spec.masked_paths, Get<std::vector<std::string>>(*linux_section, "maskedPaths", {}));
  ASSIGN(spec.readonly_paths, Get<std::vector<std::string>>(*linux_section, "readonlyPaths", {}));
  ASSIGN(spec.sysctl, (Get<std::map<std::string, std::string>>(*linux_section, "sysctl", {})));
  for (const auto& paths : {spec.masked_paths, spec.readonly_paths})
    for (const std::string& path : paths)
      if (!IsAbsolute(path)) return Invalid("masked and read-only paths must be absolute: \"" + path + "\"");
  return spec;
}

}  // namespace bulkhead::oci
