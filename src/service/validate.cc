#include "service/validate.h"

#include <unistd.h>

#include <cmath>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "common/bounded_json.h"
#include "common/time_format.h"
#include "http/encoding.h"
#include "net/allow_rules.h"
#include "storage/image_ref.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxMetadataEntries = 64;
constexpr size_t kMaxMetadataKeyBytes = 128;
constexpr size_t kMaxMetadataValueBytes = 1024;
constexpr size_t kMaxVolumePathBytes = 1024;

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message)); }

// The value of `key`, or nullptr when it is absent or null (both mean "use the default").
const json* Find(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// "/a/b" is the same as or under "/a"; "/ab" is not.
bool IsSameOrUnder(std::string_view path, std::string_view dir) {
  return path == dir || (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}

const char* TypeName(const json& value) { return value.type_name(); }

Status ReadString(const json& object, const char* key, std::string& out) {
  const json* value = Find(object, key);
  if (value == nullptr) return {};
  if (!value->is_string()) return Invalid(fmt::format("{} must be a string, not {}", key, TypeName(*value)));
  out = value->get<std::string>();
  return {};
}

// Integers; a float is accepted when it holds an exact integer (30.0), as some clients send.
Status ReadInt(const json& object, const char* key, int64_t min, int64_t max, int64_t& out) {
  const json* value = Find(object, key);
  if (value == nullptr) return {};
  const Error range = Invalid(fmt::format("{} must be between {} and {}", key, min, max));
  if (value->is_number_unsigned()) {
    const uint64_t v = value->get<uint64_t>();
    // nlohmann types every non-negative literal as unsigned: both bounds apply here too.
    if (v > static_cast<uint64_t>(max) || (min > 0 && v < static_cast<uint64_t>(min))) return range;
    out = static_cast<int64_t>(v);
  } else if (value->is_number_integer()) {
    const int64_t v = value->get<int64_t>();
    if (v < min || v > max) return range;
    out = v;
  } else if (value->is_number_float()) {
    const double v = value->get<double>();
    if (!std::isfinite(v) || v != std::trunc(v)) return Invalid(fmt::format("{} must be an integer", key));
    if (v < static_cast<double>(min) || v > static_cast<double>(max)) return range;
    out = static_cast<int64_t>(v);
  } else {
    return Invalid(fmt::format("{} must be an integer, not {}", key, TypeName(*value)));
  }
  return {};
}

Status ReadNumber(const json& object, const char* key, double min, double max, double& out) {
  const json* value = Find(object, key);
  if (value == nullptr) return {};
  if (!value->is_number()) return Invalid(fmt::format("{} must be a number, not {}", key, TypeName(*value)));
  const double v = value->get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    return Invalid(fmt::format("{} must be between {} and {}", key, min, max));
  }
  out = v;
  return {};
}

bool IsEnvKey(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

Status ReadEnv(const json& object, const char* key, std::map<std::string, std::string>& out) {
  const json* value = Find(object, key);
  if (value == nullptr) return {};
  if (!value->is_object()) return Invalid(fmt::format("{} must be an object of strings", key));
  size_t total = 0;
  std::map<std::string, std::string> env;
  for (const auto& [name, item] : value->items()) {
    if (!IsEnvKey(name)) {
      return Invalid(fmt::format("{}: invalid variable name (must match [A-Za-z_][A-Za-z0-9_]*)", key));
    }
    if (!item.is_string()) return Invalid(fmt::format("{}.{} must be a string", key, name));
    const auto& text = item.get_ref<const std::string&>();
    if (HasNul(text)) return Invalid(fmt::format("{}.{} must not contain NUL", key, name));
    total += name.size() + text.size();
    if (total > kMaxEnvBytes) return Invalid(fmt::format("{} exceeds {} bytes in total", key, kMaxEnvBytes));
    env.emplace(name, text);
  }
  out = std::move(env);
  return {};
}

Status ReadAbsolutePath(const json& object, const char* key, std::string& out) {
  std::string path;
  if (!Find(object, key)) return {};
  BH_TRY(ReadString(object, key, path));
  if (path.empty() || path[0] != '/') return Invalid(fmt::format("{} must be an absolute path", key));
  if (HasNul(path)) return Invalid(fmt::format("{} must not contain NUL", key));
  if (path.size() > kMaxPathBytes) return Invalid(fmt::format("{} exceeds {} bytes", key, kMaxPathBytes));
  out = std::move(path);
  return {};
}

Status ReadUser(const json& object, const char* key, std::string& out) {
  std::string user;
  if (!Find(object, key)) return {};
  BH_TRY(ReadString(object, key, user));
  if (!IsValidUser(user)) {
    return Invalid(fmt::format("{} must be a user name, a uid or uid:gid", key));
  }
  out = std::move(user);
  return {};
}

Status ReadMetadata(const json& object, std::map<std::string, std::string>& out) {
  const json* value = Find(object, "metadata");
  if (value == nullptr) return {};
  if (!value->is_object()) return Invalid("metadata must be an object of strings");
  if (value->size() > kMaxMetadataEntries) {
    return Invalid(fmt::format("metadata has more than {} entries", kMaxMetadataEntries));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [name, item] : value->items()) {
    if (name.empty() || name.size() > kMaxMetadataKeyBytes || HasNul(name)) {
      return Invalid(fmt::format("metadata keys must be 1 to {} bytes without NUL", kMaxMetadataKeyBytes));
    }
    if (!item.is_string()) return Invalid(fmt::format("metadata.{} must be a string", name));
    const auto& text = item.get_ref<const std::string&>();
    if (text.size() > kMaxMetadataValueBytes || HasNul(text)) {
      return Invalid(fmt::format("metadata.{} must be at most {} bytes without NUL", name,
                                 kMaxMetadataValueBytes));
    }
    metadata.emplace(name, text);
  }
  out = std::move(metadata);
  return {};
}

// A network object ({"mode", "allow", "deny"}) as in POST /v1/sandboxes and PUT .../network.
// Every entry is checked here (net::ParsePolicy), so the manager only ever sees valid policies.
Result<core::NetworkPolicy> ParseNetworkObject(const json& value) {
  if (!value.is_object()) return Invalid("network must be an object");
  core::NetworkPolicy policy;
  for (const auto& [key, unused] : value.items()) {
    if (key != "mode" && key != "allow" && key != "deny") {
      return Invalid(fmt::format("network.{} is not a known field", key));
    }
  }
  if (const json* mode = Find(value, "mode")) {
    if (!mode->is_string()) return Invalid("network.mode must be a string");
    policy.mode = mode->get<std::string>();
  }
  for (const auto& [name, out] : {std::pair{"allow", &policy.allow}, std::pair{"deny", &policy.deny}}) {
    const json* list = Find(value, name);
    if (list == nullptr) continue;
    if (!list->is_array()) return Invalid(fmt::format("network.{} must be an array of strings", name));
    for (const auto& entry : *list) {
      if (!entry.is_string()) return Invalid(fmt::format("network.{} must be an array of strings", name));
      out->push_back(entry.get<std::string>());
    }
  }
  auto parsed = net::ParsePolicy(policy.mode, policy.allow, policy.deny);
  if (!parsed.ok()) return Invalid("network: " + parsed.error().message);
  return policy;
}

Status ReadNetwork(const json& object, core::NetworkPolicy& out) {
  const json* value = Find(object, "network");
  if (value == nullptr) return {};
  auto policy = ParseNetworkObject(*value);
  if (!policy.ok()) return policy.error();
  out = std::move(*policy);
  return {};
}

// "preview": {"public": bool}. The token of a private preview is the daemon's to choose: a
// client's own would be as guessable as the client made it.
Status ReadPreview(const json& object, core::PreviewAccess& out) {
  const json* value = Find(object, "preview");
  if (value == nullptr) return {};
  if (!value->is_object()) return Invalid(fmt::format("preview must be an object, not {}", TypeName(*value)));
  for (const auto& [key, unused] : value->items()) {
    if (key == "token") return Invalid("preview.token is issued by the daemon and cannot be given");
    if (key != "public") return Invalid(fmt::format("preview.{} is not a known field", key));
  }
  if (const json* is_public = Find(*value, "public")) {
    if (!is_public->is_boolean()) {
      return Invalid(fmt::format("preview.public must be a boolean, not {}", TypeName(*is_public)));
    }
    out.is_public = is_public->get<bool>();
  }
  return {};
}

// A volume's mount path: absolute and normalized, so that "/a/" and "/a/./b" cannot slip past
// the checks below, and outside the kernel's file systems that the sandbox gets fresh.
Status CheckVolumePath(const std::string& field, const std::string& path) {
  if (path.empty() || path[0] != '/') return Invalid(field + " must be an absolute path");
  if (path == "/") return Invalid(field + " must not be /");
  if (path.size() > kMaxVolumePathBytes) return Invalid(fmt::format("{} exceeds {} bytes", field, kMaxVolumePathBytes));
  if (HasNul(path)) return Invalid(field + " must not contain NUL");
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string_view name(path.data() + start, end - start);
    if (name.empty() || name == "." || name == "..")
      return Invalid(field + " must be normalized (no empty, . or .. components, no trailing /)");
    if (name.size() > 255) return Invalid(field + " has a component longer than 255 bytes");
    start = end + 1;
  }
  for (const char* reserved : {"/proc", "/sys", "/dev"}) {
    if (IsSameOrUnder(path, reserved)) return Invalid(fmt::format("{} must not be in {}", field, reserved));
  }
  return {};
}

Status ReadVolumes(const json& object, std::vector<core::VolumeMount>& out) {
  const json* value = Find(object, "volumes");
  if (value == nullptr) return {};
  if (!value->is_array()) return Invalid("volumes must be an array");
  if (value->size() > kMaxVolumeMounts) {
    return Invalid(fmt::format("volumes has more than {} entries", kMaxVolumeMounts));
  }
  std::vector<core::VolumeMount> mounts;
  for (size_t i = 0; i < value->size(); ++i) {
    const json& entry = (*value)[i];
    const std::string field = fmt::format("volumes[{}]", i);
    if (!entry.is_object()) return Invalid(field + " must be an object {name, path, read_only}");
    // A misspelt read_only must not quietly mount read-write.
    for (const auto& [key, unused] : entry.items()) {
      if (key != "name" && key != "path" && key != "read_only") {
        return Invalid(fmt::format("{}.{} is not a known field", field, key));
      }
    }
    core::VolumeMount mount;
    const json* name = Find(entry, "name");
    if (name == nullptr || !name->is_string() || !IsValidVolumeName(name->get<std::string>()))
      return Invalid(field + ".name must be a volume name (^[a-z0-9][a-z0-9_.-]{0,62}$)");
    mount.name = name->get<std::string>();
    const json* path = Find(entry, "path");
    if (path == nullptr || !path->is_string()) return Invalid(field + ".path must be a string");
    mount.path = path->get<std::string>();
    BH_TRY(CheckVolumePath(field + ".path", mount.path));
    if (const json* read_only = Find(entry, "read_only")) {
      if (!read_only->is_boolean()) return Invalid(field + ".read_only must be a boolean");
      mount.read_only = read_only->get<bool>();
    }
    for (const auto& other : mounts) {
      if (IsSameOrUnder(mount.path, other.path) || IsSameOrUnder(other.path, mount.path))
        return Invalid(fmt::format("{}.path {} overlaps the path {} of another volume", field, mount.path, other.path));
    }
    mounts.push_back(std::move(mount));
  }
  out = std::move(mounts);
  return {};
}

// "sudo_users": names or uids that may run the sandbox's sudo (ctl::kSudoUsers).
Status ReadSudoUsers(const json& object, std::vector<std::string>& out) {
  const json* value = Find(object, "sudo_users");
  if (value == nullptr) return {};
  if (!value->is_array()) return Invalid("sudo_users must be an array of user names or uids");
  if (value->size() > kMaxSudoUsers) return Invalid(fmt::format("sudo_users has more than {} entries", kMaxSudoUsers));
  std::vector<std::string> users;
  for (size_t i = 0; i < value->size(); ++i) {
    const json& entry = (*value)[i];
    if (!entry.is_string() || !IsValidUser(entry.get<std::string>()) ||
        entry.get<std::string>().find(':') != std::string::npos) {
      return Invalid(fmt::format("sudo_users[{}] must be a user name or a uid", i));
    }
    users.push_back(entry.get<std::string>());
  }
  out = std::move(users);
  return {};
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A decimal id below 2^32 - 1 ((uid_t)-1 means "no change" to the kernel).
bool IsNumericId(std::string_view s) {
  if (!AllDigits(s) || s.size() > 10) return false;
  return std::stoull(std::string(s)) < 4294967295ull;
}

// A boolean field; absent or null leaves `out` as it is.
Status ReadBool(const json& object, const char* key, bool& out) {
  const json* value = Find(object, key);
  if (value == nullptr) return {};
  if (!value->is_boolean()) return Invalid(std::string(key) + " must be a boolean");
  out = value->get<bool>();
  return {};
}

}  // namespace

HostLimits HostLimits::Detect(std::string default_runtime) {
  HostLimits limits;
  limits.default_runtime = std::move(default_runtime);
  const unsigned cpus = std::thread::hardware_concurrency();
  limits.max_cpus = cpus > 0 ? cpus : 1;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    limits.max_memory_mb = static_cast<int64_t>(pages) * page_size / (1024 * 1024);
  }
  return limits;
}

Result<core::SandboxSpec> ParseSandboxSpec(const json& body, const HostLimits& host) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  core::SandboxSpec spec;

  BH_TRY(ReadString(body, "image", spec.image));
  // A stored image's name, or a registry reference (pulled on first use: api/image_handlers.h).
  // Whether a name without a registry has one to be looked up on is the daemon's to say.
  if (!IsValidImageName(spec.image) && !storage::ParseImageRef(spec.image, "registry.invalid").ok()) {
    return Invalid("image must be an image name (^[a-z0-9][a-z0-9._-]{0,63}$) or a registry reference "
                   "([REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST])");
  }

  spec.runtime = host.default_runtime;
  BH_TRY(ReadString(body, "runtime", spec.runtime));
  // Whether this host has the tier is the core's to say (422 runtime_unavailable).
  if (spec.runtime != "native" && spec.runtime != "gvisor" && spec.runtime != "microvm")
    return Invalid("runtime must be one of native, gvisor, microvm");

  BH_TRY(ReadNumber(body, "cpus", 0.05, host.max_cpus, spec.cpus));
  BH_TRY(ReadInt(body, "memory_mb", 32, std::max<int64_t>(32, host.max_memory_mb), spec.memory_mb));
  BH_TRY(ReadInt(body, "disk_mb", 64, 1048576, spec.disk_mb));
  BH_TRY(ReadInt(body, "pids", 16, 65536, spec.pids));
  BH_TRY(ReadInt(body, "timeout_s", 0, kMaxLifetimeS, spec.timeout_s));
  BH_TRY(ReadInt(body, "idle_timeout_s", 0, kMaxLifetimeS, spec.idle_timeout_s));

  BH_TRY(ReadString(body, "on_timeout", spec.on_timeout));
  if (spec.on_timeout != "kill" && spec.on_timeout != "pause" && spec.on_timeout != "stop") {
    return Invalid("on_timeout must be one of kill, pause, stop");
  }

  BH_TRY(ReadEnv(body, "env", spec.env));
  BH_TRY(ReadAbsolutePath(body, "workdir", spec.workdir));
  BH_TRY(ReadUser(body, "user", spec.user));
  BH_TRY(ReadNetwork(body, spec.network));
  BH_TRY(ReadMetadata(body, spec.metadata));

  if (Find(body, "from_snapshot")) {
    std::string snapshot;
    BH_TRY(ReadString(body, "from_snapshot", snapshot));
    if (snapshot.empty() || snapshot.size() > 128 || HasNul(snapshot))
      return Invalid("from_snapshot must be a snapshot id");
    spec.from_snapshot = std::move(snapshot);
    if (!Find(body, "image")) spec.image.clear();  // the snapshot's
    // A memory snapshot's runtime, which alone restores it; else the default. Its memory too:
    // a microvm guest's size is part of what was saved (0: the core decides).
    if (!Find(body, "runtime")) spec.runtime.clear();
    if (!Find(body, "memory_mb")) spec.memory_mb = 0;
  }
  BH_TRY(ReadVolumes(body, spec.volumes));
  BH_TRY(ReadPreview(body, spec.preview));
  BH_TRY(ReadSudoUsers(body, spec.sudo_users));
  return spec;
}

Result<ExecOptions> ParseExecOptions(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  ExecOptions options;
  core::ExecRequest& request = options.request;

  const json* cmd = Find(body, "cmd");
  if (cmd == nullptr) return Invalid("cmd is required");
  if (cmd->is_string()) {
    const auto& line = cmd->get_ref<const std::string&>();
    if (line.empty()) return Invalid("cmd must not be empty");
    if (HasNul(line)) return Invalid("cmd must not contain NUL");
    if (line.size() > kMaxArgvBytes) return Invalid(fmt::format("cmd exceeds {} bytes", kMaxArgvBytes));
    request.argv = {"/bin/sh", "-c", line};
  } else if (cmd->is_array()) {
    if (cmd->empty()) return Invalid("cmd must not be empty");
    size_t total = 0;
    for (size_t i = 0; i < cmd->size(); ++i) {
      const json& arg = (*cmd)[i];
      if (!arg.is_string()) return Invalid(fmt::format("cmd[{}] must be a string", i));
      const auto& text = arg.get_ref<const std::string&>();
      if (HasNul(text)) return Invalid(fmt::format("cmd[{}] must not contain NUL", i));
      total += text.size() + 1;
      if (total > kMaxArgvBytes) return Invalid(fmt::format("cmd exceeds {} bytes", kMaxArgvBytes));
      request.argv.push_back(text);
    }
    if (request.argv[0].empty()) return Invalid("cmd[0] must not be empty");
  } else {
    return Invalid("cmd must be an array of strings or a string");
  }

  if (Find(body, "cwd")) {
    std::string cwd;
    BH_TRY(ReadAbsolutePath(body, "cwd", cwd));
    request.cwd = std::move(cwd);
  }
  BH_TRY(ReadEnv(body, "env", request.env));
  if (Find(body, "user")) {
    std::string user;
    BH_TRY(ReadUser(body, "user", user));
    request.user = std::move(user);
  }

  const json* stdin_text = Find(body, "stdin");
  const json* stdin_b64 = Find(body, "stdin_b64");
  if (stdin_text && stdin_b64) return Invalid("give stdin or stdin_b64, not both");
  if (stdin_text) {
    if (!stdin_text->is_string()) return Invalid("stdin must be a string");
    const auto& text = stdin_text->get_ref<const std::string&>();
    if (text.size() > kMaxStdinBytes) return Invalid(fmt::format("stdin exceeds {} bytes", kMaxStdinBytes));
    request.stdin_data = text;
  } else if (stdin_b64) {
    if (!stdin_b64->is_string()) return Invalid("stdin_b64 must be a string");
    const auto& text = stdin_b64->get_ref<const std::string&>();
    if (Base64DecodedSize(text) > kMaxStdinBytes) {
      return Invalid(fmt::format("stdin_b64 decodes to more than {} bytes", kMaxStdinBytes));
    }
    auto decoded = Base64Decode(text);
    if (!decoded) return Invalid("stdin_b64 is not valid base64");
    request.stdin_data = std::move(*decoded);
  }

  BH_TRY(ReadInt(body, "timeout_s", 0, kMaxExecTimeoutS, request.timeout_s));
  BH_TRY(ReadInt(body, "max_output_bytes", 0, kMaxOutputBytesLimit, options.max_output_bytes));
  request.output_limit = options.max_output_bytes;
  return options;
}

Result<int64_t> ParseTimeoutUpdate(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  if (!Find(body, "timeout_s")) return Invalid("timeout_s is required");
  int64_t timeout_s = 0;
  BH_TRY(ReadInt(body, "timeout_s", 0, kMaxLifetimeS, timeout_s));
  return timeout_s;
}

Result<core::NetworkPolicy> ParseNetworkUpdate(const json& body) { return ParseNetworkObject(body); }

Result<int64_t> ParseEgressLimit(const std::vector<std::pair<std::string, std::string>>& query) {
  int64_t limit = 1000;
  for (const auto& [key, value] : query) {
    if (key != "limit") return Invalid(fmt::format("unknown query parameter \"{}\"", key));
    if (!AllDigits(value) || value.size() > 5 || std::stoll(value) < 1 || std::stoll(value) > 10000)
      return Invalid("limit must be a whole number from 1 to 10000");
    limit = std::stoll(value);
  }
  return limit;
}

Result<core::AuditLog::Filter> ParseAuditFilter(const std::vector<std::pair<std::string, std::string>>& query) {
  core::AuditLog::Filter filter;
  for (const auto& [key, value] : query) {
    if (key == "after" || key == "limit") {
      const bool limit = key == "limit";
      if (!AllDigits(value) || value.size() > 19 || (limit && (value.size() > 4 || std::stoll(value) < 1 || std::stoll(value) > 1000)))
        return Invalid(limit ? "limit must be a whole number from 1 to 1000" : "after must be a record's seq (a whole number)");
      (limit ? filter.limit : filter.after) = std::stoull(value);
    } else if (key == "action") {
      filter.action = value;
    } else if (key == "target") {
      filter.target = value;
    } else if (key == "tenant") {
      filter.tenant = value;
    } else if (key == "key") {
      filter.key = value;
    } else if (key == "since" || key == "until") {
      const std::optional<int64_t> ms = ParseRfc3339Millis(value);
      if (!ms) return Invalid(fmt::format("{} must be an RFC 3339 time, such as 2026-12-01T00:00:00Z", key));
      (key == "since" ? filter.since : filter.until) = Rfc3339Millis(*ms);
    } else {
      return Invalid(fmt::format("unknown query parameter \"{}\"", key));
    }
  }
  return filter;
}

Result<core::ListFilter> ParseListFilter(const std::vector<std::pair<std::string, std::string>>& query) {
  static constexpr std::string_view kMetadataPrefix = "metadata.";
  core::ListFilter filter;
  for (const auto& [key, value] : query) {
    if (key == "state") {
      if (value != "starting" && value != "running" && value != "paused" && value != "stopped" &&
          value != "error") {
        return Invalid("state must be one of starting, running, paused, stopped, error");
      }
      filter.state = value;
    } else if (key.starts_with(kMetadataPrefix)) {
      const std::string name = key.substr(kMetadataPrefix.size());
      if (name.empty()) return Invalid("metadata filter needs a key: metadata.<key>=<value>");
      filter.metadata[name] = value;
    }
    // Other parameters are ignored, like unknown JSON fields.
  }
  return filter;
}

Result<SnapshotRequest> ParseSnapshotRequest(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  SnapshotRequest request;
  // (Whether the sandbox's runtime can keep memory is the core's to say: 422 runtime_unsupported.)
  BH_TRY(ReadBool(body, "memory", request.memory));
  std::string& name = request.name;
  BH_TRY(ReadString(body, "name", name));
  if (Find(body, "name") && (name.empty() || name.size() > kMaxSnapshotNameBytes))
    return Invalid(fmt::format("name must be 1 to {} bytes", kMaxSnapshotNameBytes));
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) return Invalid("name must not contain control characters");
  }
  return request;
}

Result<bool> ParsePauseRequest(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  bool to_disk = false;
  BH_TRY(ReadBool(body, "to_disk", to_disk));
  return to_disk;
}

Result<ForkRequest> ParseForkRequest(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  ForkRequest request;
  BH_TRY(ReadBool(body, "memory", request.memory));
  int64_t count = 1;
  BH_TRY(ReadInt(body, "count", 1, kMaxForkCount, count));
  request.count = static_cast<int>(count);
  return request;
}

bool IsValidImageName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    const bool punct = c == '.' || c == '_' || c == '-';
    if (!alnum && !(punct && i > 0)) return false;
  }
  return true;
}

Result<VolumeRequest> ParseVolumeRequest(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  VolumeRequest request;
  const json* name = Find(body, "name");
  if (name == nullptr) return Invalid("name is required");
  if (!name->is_string() || !IsValidVolumeName(name->get<std::string>()))
    return Invalid("name must match ^[a-z0-9][a-z0-9_.-]{0,62}$");
  request.name = name->get<std::string>();
  BH_TRY(ReadInt(body, "size_mb", 1, kMaxVolumeSizeMb, request.size_mb));
  return request;
}

bool IsValidVolumeName(std::string_view name) { return name.size() <= 63 && IsValidImageName(name); }

bool IsValidSandboxId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Error SandboxNotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no sandbox with id \"{}\"", id), "sandbox_not_found");
}

Error SnapshotNotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no snapshot with id \"{}\"", id), "snapshot_not_found");
}

bool IsValidUser(std::string_view user) {
  if (const size_t colon = user.find(':'); colon != std::string_view::npos) {
    return IsNumericId(user.substr(0, colon)) && IsNumericId(user.substr(colon + 1));
  }
  if (AllDigits(user)) return IsNumericId(user);
  if (user.empty() || user.size() > 32) return false;
  for (size_t i = 0; i < user.size(); ++i) {
    const char c = user[i];
    const bool start = (c >= 'a' && c <= 'z') || c == '_';
    const bool rest = (c >= '0' && c <= '9') || c == '-';
    if (!start && !(rest && i > 0)) return false;
  }
  return true;
}

}  // namespace bulkhead::api
