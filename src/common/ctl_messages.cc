#include "common/ctl_messages.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>

#include "common/bounded_json.h"
#include "common/ctl_protocol.h"

namespace bulkhead::ctl {
namespace {

using nlohmann::json;

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kInvalid, message); }

// Text for a frame; invalid UTF-8 (a path in a message, a command's argument) is replaced
// rather than thrown about.
std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// execve() cannot carry a NUL inside a string; JSON can ("\u0000").
bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

Result<json> ParseObject(std::string_view text, const char* what) {
  json doc = ParseBoundedJson(text);
  if (!doc.is_object()) return Invalid(std::string(what) + " is not a JSON object");
  return doc;
}

// The field, or nullptr if it is absent or null.
const json* Field(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it == doc.end() || it->is_null() ? nullptr : &*it;
}

Status ReadStrings(const json& doc, const char* key, std::vector<std::string>& out) {
  const json* v = Field(doc, key);
  if (!v) return {};
  if (!v->is_array()) return Invalid(std::string(key) + " must be an array of strings");
  for (const auto& item : *v) {
    if (!item.is_string()) return Invalid(std::string(key) + " must be an array of strings");
    out.push_back(item.get<std::string>());
    if (HasNul(out.back())) return Invalid(std::string(key) + " contains a NUL byte");
  }
  return {};
}

Status ReadBool(const json& doc, const char* key, bool& out) {
  const json* v = Field(doc, key);
  if (!v) return {};
  if (!v->is_boolean()) return Invalid(std::string(key) + " must be a boolean");
  out = v->get<bool>();
  return {};
}

// The host's wall clock and fresh entropy, for a guest whose own are stale (a restored copy).
Status ReadClockAndEntropy(const json& doc, int64_t& realtime_ns, std::string& entropy) {
  if (const json* realtime = Field(doc, "realtime_ns")) {
    if (!realtime->is_number_integer() || realtime->get<int64_t>() <= 0)
      return Invalid("realtime_ns must be a positive integer");
    realtime_ns = realtime->get<int64_t>();
  }
  if (const json* hex = Field(doc, "entropy")) {
    if (!hex->is_string() || hex->get<std::string>().size() != 64 ||
        hex->get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
      return Invalid("entropy must be 64 lower-case hex digits");
    entropy = hex->get<std::string>();
  }
  return {};
}

Status ReadUnsigned(const json& doc, const char* key, uint64_t& out) {
  const json* v = Field(doc, key);
  if (!v) return {};
  // Signed or unsigned in the parser's eyes; never negative.
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0))
    return Invalid(std::string(key) + " must be a non-negative integer");
  out = v->get<uint64_t>();
  return {};
}

Status ReadOptionalUnsigned(const json& doc, const char* key, std::optional<uint64_t>& out) {
  if (!Field(doc, key)) return {};
  uint64_t value = 0;
  BH_TRY(ReadUnsigned(doc, key, value));
  out = value;
  return {};
}

// An int field in min..max; absent or null leaves `out` empty.
Status ReadOptionalInt(const json& doc, const char* key, int64_t min, int64_t max, std::optional<int>& out) {
  const json* v = Field(doc, key);
  if (!v) return {};
  if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > max)
    return Invalid(std::string(key) + " must be an integer in " + std::to_string(min) + ".." + std::to_string(max));
  out = static_cast<int>(v->get<int64_t>());
  return {};
}

Status ReadOptionalString(const json& doc, const char* key, std::optional<std::string>& out) {
  const json* v = Field(doc, key);
  if (!v) return {};
  if (!v->is_string()) return Invalid(std::string(key) + " must be a string");
  out = v->get<std::string>();
  return {};
}

Result<int> ReadPid(const json& doc) {
  std::optional<int> pid;
  BH_TRY(ReadOptionalInt(doc, "pid", 1, INT32_MAX, pid));
  if (!pid) return Invalid("pid is missing");
  return *pid;
}

Result<PtySize> PtyFrom(const json& doc) {
  PtySize size;
  for (auto [key, field] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    std::optional<int> value;
    BH_TRY(ReadOptionalInt(doc, key, 1, 10000, value));
    if (value) *field = static_cast<uint16_t>(*value);
  }
  return size;
}

json PtyJson(const PtySize& size) { return {{"cols", size.cols}, {"rows", size.rows}}; }

json OffsetsJson(const StreamOffsets& o) { return {{"stdout_offset", o.stdout_offset}, {"stderr_offset", o.stderr_offset}}; }

Result<StreamOffsets> OffsetsFrom(const json& doc) {
  if (!Field(doc, "stdout_offset") || !Field(doc, "stderr_offset")) return Invalid("missing stream offsets");
  StreamOffsets o;
  BH_TRY(ReadUnsigned(doc, "stdout_offset", o.stdout_offset));
  BH_TRY(ReadUnsigned(doc, "stderr_offset", o.stderr_offset));
  return o;
}

}  // namespace

json ToJson(const ProcessInfo& p) {
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  return {{"pid", p.pid},
          {"tag", opt(p.tag)},
          {"cmd", p.cmd},
          {"state", p.exited ? "exited" : "running"},
          {"exit_code", opt(p.exit_code)},
          {"signal", opt(p.signal)},
          {"started_at", p.started_at},
          {"exited_at", opt(p.exited_at)},
          {"pty", p.pty ? PtyJson(*p.pty) : json(nullptr)},
          {"stdout_offset", p.stdout_offset},
          {"stderr_offset", p.stderr_offset},
          {"stdout_start", p.stdout_start},
          {"stderr_start", p.stderr_start}};
}

namespace {

// Every field of the documented type, or an error: what reaches a client is what the API documents.
Result<ProcessInfo> ProcessFrom(const json& doc) {
  if (!doc.is_object()) return Invalid("a process is not an object");
  ProcessInfo p;
  auto pid = ReadPid(doc);
  if (!pid) return pid.error();
  p.pid = *pid;
  BH_TRY(ReadOptionalString(doc, "tag", p.tag));
  if (!Field(doc, "cmd")) return Invalid("a process without cmd");
  BH_TRY(ReadStrings(doc, "cmd", p.cmd));
  const json* state = Field(doc, "state");
  if (!state || (*state != "running" && *state != "exited")) return Invalid("a process's state is running or exited");
  p.exited = *state == "exited";
  BH_TRY(ReadOptionalInt(doc, "exit_code", 0, 255, p.exit_code));
  BH_TRY(ReadOptionalInt(doc, "signal", 1, 64, p.signal));
  std::optional<std::string> started;
  BH_TRY(ReadOptionalString(doc, "started_at", started));
  if (!started) return Invalid("a process without started_at");
  p.started_at = std::move(*started);
  BH_TRY(ReadOptionalString(doc, "exited_at", p.exited_at));
  if (const json* pty = Field(doc, "pty")) {
    if (!pty->is_object() || !Field(*pty, "cols") || !Field(*pty, "rows")) return Invalid("a process's pty has no size");
    auto size = PtyFrom(*pty);
    if (!size) return size.error();
    p.pty = *size;
  }
  for (const char* key : {"stdout_offset", "stderr_offset", "stdout_start", "stderr_start"})
    if (!Field(doc, key)) return Invalid(std::string("a process without ") + key);
  BH_TRY(ReadUnsigned(doc, "stdout_offset", p.stdout_offset));
  BH_TRY(ReadUnsigned(doc, "stderr_offset", p.stderr_offset));
  BH_TRY(ReadUnsigned(doc, "stdout_start", p.stdout_start));
  BH_TRY(ReadUnsigned(doc, "stderr_start", p.stderr_start));
  return p;
}

constexpr std::pair<ErrorWord, const char*> kWords[] = {
    {ErrorWord::kNotFound, "not_found"},
    {ErrorWord::kInvalidArgument, "invalid_argument"},
    {ErrorWord::kInternal, "internal"},
};

}  // namespace

ErrorWord WordOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound: return ErrorWord::kNotFound;
    case ErrorCode::kBadRequest:
    case ErrorCode::kInvalid: return ErrorWord::kInvalidArgument;
    default: return ErrorWord::kInternal;
  }
}

ErrorCode CodeOf(ErrorWord word) {
  switch (word) {
    case ErrorWord::kNotFound: return ErrorCode::kNotFound;
    case ErrorWord::kInvalidArgument: return ErrorCode::kInvalid;
    case ErrorWord::kInternal: break;
  }
  return ErrorCode::kInternal;
}

// ---- daemon -> init

std::string Encode(const ExecMessage& m) {
  json doc = {{"env", m.env}, {"cwd", m.cwd}, {"timeout_ms", m.timeout_ms}, {"stdin", m.stdin_enabled}};
  if (m.file_op) {
    doc["file_op"] = *m.file_op;
  } else {
    doc["argv"] = m.argv;
  }
  if (m.user) doc["user"] = *m.user;
  if (m.background) doc["background"] = true;
  if (m.attach) doc["attach"] = true;
  if (m.tag) doc["tag"] = *m.tag;
  if (m.pty) doc["pty"] = PtyJson(*m.pty);
  if (m.output_limit) doc["output_limit"] = *m.output_limit;
  if (m.nofile) doc["nofile"] = *m.nofile;
  return Dump(doc);
}

Result<ExecMessage> DecodeExec(std::string_view text) {
  auto parsed = ParseObject(text, "kExec");
  if (!parsed) return parsed.error();
  const json& doc = *parsed;
  ExecMessage m;
  if (const json* op = Field(doc, "file_op")) {
    if (!op->is_object()) return Invalid("file_op must be an object");
    if (doc.contains("argv")) return Invalid("a file operation has no argv");
    m.file_op = *op;
  } else {
    BH_TRY(ReadStrings(doc, "argv", m.argv));
    if (m.argv.empty() || m.argv[0].empty()) return Invalid("argv must name a program");
  }
  BH_TRY(ReadStrings(doc, "env", m.env));
  for (const auto& entry : m.env)
    if (entry.find('=') == std::string::npos || entry[0] == '=') return Invalid("env entry \"" + entry + "\" is not K=V");
  std::optional<std::string> cwd;
  BH_TRY(ReadOptionalString(doc, "cwd", cwd));
  if (cwd) {
    if (cwd->empty()) return Invalid("cwd must be a non-empty string");
    if (HasNul(*cwd)) return Invalid("cwd contains a NUL byte");
    m.cwd = std::move(*cwd);
  }
  BH_TRY(ReadOptionalString(doc, "user", m.user));
  if (m.user && m.user->empty()) m.user.reset();
  BH_TRY(ReadUnsigned(doc, "timeout_ms", m.timeout_ms));
  BH_TRY(ReadOptionalUnsigned(doc, "output_limit", m.output_limit));
  BH_TRY(ReadOptionalUnsigned(doc, "nofile", m.nofile));
  if (m.nofile == 0u) return Invalid("nofile must be a positive integer");
  BH_TRY(ReadBool(doc, "stdin", m.stdin_enabled));
  BH_TRY(ReadBool(doc, "background", m.background));
  BH_TRY(ReadBool(doc, "attach", m.attach));
  BH_TRY(ReadOptionalString(doc, "tag", m.tag));
  if (const json* pty = Field(doc, "pty")) {
    if (!pty->is_object()) return Invalid("pty must be an object");
    auto size = PtyFrom(*pty);
    if (!size) return size.error();
    m.pty = *size;
  }
  if (m.file_op && (m.background || m.pty)) return Invalid("a file operation runs in the foreground without a pty");
  return m;
}

std::string Encode(const AttachMessage& m) {
  return Dump({{"pid", m.pid},
               {"output", m.output},
               {"follow", m.follow},
               {"hold", m.hold},
               {"stdout_offset", m.stdout_offset},
               {"stderr_offset", m.stderr_offset}});
}

Result<AttachMessage> DecodeAttach(std::string_view text) {
  auto parsed = ParseObject(text, "kProcAttach");
  if (!parsed) return parsed.error();
  AttachMessage m;
  auto pid = ReadPid(*parsed);
  if (!pid) return pid.error();
  m.pid = *pid;
  BH_TRY(ReadBool(*parsed, "output", m.output));
  BH_TRY(ReadBool(*parsed, "follow", m.follow));
  BH_TRY(ReadBool(*parsed, "hold", m.hold));
  BH_TRY(ReadUnsigned(*parsed, "stdout_offset", m.stdout_offset));
  BH_TRY(ReadUnsigned(*parsed, "stderr_offset", m.stderr_offset));
  return m;
}

std::string Encode(const PtySize& m) { return Dump(PtyJson(m)); }

Result<PtySize> DecodePtySize(std::string_view text) {
  auto parsed = ParseObject(text, "kResize");
  if (!parsed) return parsed.error();
  return PtyFrom(*parsed);
}

std::string Encode(const SudoUsersMessage& m) { return Dump({{"users", m.users}}); }

Result<SudoUsersMessage> DecodeSudoUsers(std::string_view text) {
  constexpr size_t kMaxUserBytes = 256;
  auto parsed = ParseObject(text, "kSudoUsers");
  if (!parsed) return parsed.error();
  if (!Field(*parsed, "users")) return Invalid("users must be an array of user names or uids");
  SudoUsersMessage m;
  BH_TRY(ReadStrings(*parsed, "users", m.users));
  if (m.users.size() > kMaxSudoUsers) return Invalid("too many sudo users");
  for (const auto& user : m.users) {
    if (user.empty() || user.size() > kMaxUserBytes || user.find_first_of(":/") != std::string::npos)
      return Invalid("a sudo user must be a user name or a uid");
  }
  return m;
}

std::string Encode(const SignalMessage& m) { return Dump({{"signal", m.signal}}); }

Result<SignalMessage> DecodeSignal(std::string_view text) {
  auto parsed = ParseObject(text, "kSignal");
  if (!parsed) return parsed.error();
  std::optional<int> signal;
  BH_TRY(ReadOptionalInt(*parsed, "signal", 1, 64, signal));
  if (!signal) return Invalid("signal must be an integer");
  return SignalMessage{*signal};
}

std::string Encode(const LimitsMessage& m) {
  return Dump({{"pids", m.pids}, {"memory_bytes", m.memory_bytes}, {"cpus", m.cpus}});
}

Result<LimitsMessage> DecodeLimits(std::string_view text) {
  auto parsed = ParseObject(text, "kLimits");
  if (!parsed) return parsed.error();
  LimitsMessage m;
  std::optional<int> pids;
  BH_TRY(ReadOptionalInt(*parsed, "pids", 1, INT32_MAX, pids));
  if (!pids) return Invalid("pids must be a positive integer");
  m.pids = *pids;
  std::optional<uint64_t> memory;
  BH_TRY(ReadOptionalUnsigned(*parsed, "memory_bytes", memory));
  if (!memory || *memory == 0 || *memory > (uint64_t{1} << 50)) return Invalid("memory_bytes must be a positive integer");
  m.memory_bytes = static_cast<int64_t>(*memory);
  const json* cpus = Field(*parsed, "cpus");
  if (!cpus || !cpus->is_number() || cpus->get<double>() < 0.01 || cpus->get<double>() > 4096)
    return Invalid("cpus must be a number from 0.01 to 4096");
  m.cpus = cpus->get<double>();
  return m;
}

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

bool IsShareTag(const std::string& tag) {
  if (tag.empty() || tag.size() > 36) return false;
  for (char c : tag)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

bool IsCleanAbsolutePath(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.size() > 4096 || HasNul(path)) return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string_view part(path.data() + start, end - start);
    if (part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string EncodeGuestBootArg(const GuestBootMessage& m) {
  json volumes = json::array();
  for (const GuestVolume& v : m.volumes)
    volumes.push_back({{"tag", v.tag}, {"target", v.target}, {"read_only", v.read_only}});
  json message = {{"limits", json::parse(Encode(m.limits))},
                  {"vsock_port", m.vsock_port},
                  {"volumes", volumes},
                  {"network", m.network}};
  if (m.realtime_ns > 0) message["realtime_ns"] = m.realtime_ns;
  if (!m.entropy.empty()) message["entropy"] = m.entropy;
  const std::string text = Dump(message);
  std::string hex;
  hex.reserve(text.size() * 2);
  for (unsigned char c : text) {
    hex.push_back(kHexDigits[c >> 4]);
    hex.push_back(kHexDigits[c & 15]);
  }
  return hex;
}

Result<GuestBootMessage> DecodeGuestBootArg(std::string_view hex) {
  if (hex.size() % 2 != 0 || hex.size() > 2 * 65536) return Invalid("the guest boot argument is not hex");
  std::string text;
  for (size_t i = 0; i < hex.size(); i += 2) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int high = nibble(hex[i]), low = nibble(hex[i + 1]);
    if (high < 0 || low < 0) return Invalid("the guest boot argument is not hex");
    text.push_back(static_cast<char>(high << 4 | low));
  }
  auto parsed = ParseObject(text, "the guest boot argument");
  if (!parsed) return parsed.error();
  GuestBootMessage m;
  const json* limits = Field(*parsed, "limits");
  if (!limits) return Invalid("the guest boot argument has no limits");
  auto decoded = DecodeLimits(limits->dump());
  if (!decoded) return decoded.error();
  m.limits = *decoded;
  uint64_t port = 0;
  BH_TRY(ReadUnsigned(*parsed, "vsock_port", port));
  if (port == 0 || port >= 0xffffffffu) return Invalid("vsock_port must be 1 .. 4294967294");
  m.vsock_port = static_cast<uint32_t>(port);
  if (const json* volumes = Field(*parsed, "volumes")) {
    if (!volumes->is_array() || volumes->size() > kMaxGuestVolumes)
      return Invalid("volumes must be an array of at most " + std::to_string(kMaxGuestVolumes));
    for (const json& v : *volumes) {
      if (!v.is_object()) return Invalid("a volume must be an object");
      GuestVolume volume;
      const json* tag = Field(v, "tag");
      const json* target = Field(v, "target");
      if (!tag || !tag->is_string() || !IsShareTag(volume.tag = tag->get<std::string>()))
        return Invalid("a volume's tag must be 1-36 of [a-z0-9-]");
      if (!target || !target->is_string() || !IsCleanAbsolutePath(volume.target = target->get<std::string>()) ||
          volume.target == "/")
        return Invalid("a volume's target must be an absolute path below / without . or ..");
      BH_TRY(ReadBool(v, "read_only", volume.read_only));
      m.volumes.push_back(std::move(volume));
    }
  }
  BH_TRY(ReadBool(*parsed, "network", m.network));
  BH_TRY(ReadClockAndEntropy(*parsed, m.realtime_ns, m.entropy));
  return m;
}

std::string Encode(const FreezeMessage& m) {
  json message = {{"frozen", m.frozen}};
  if (m.realtime_ns > 0) message["realtime_ns"] = m.realtime_ns;
  if (!m.entropy.empty()) message["entropy"] = m.entropy;
  return Dump(message);
}

Result<FreezeMessage> DecodeFreeze(std::string_view text) {
  auto parsed = ParseObject(text, "kFreeze");
  if (!parsed) return parsed.error();
  if (!Field(*parsed, "frozen")) return Invalid("frozen must be a boolean");
  FreezeMessage m;
  BH_TRY(ReadBool(*parsed, "frozen", m.frozen));
  BH_TRY(ReadClockAndEntropy(*parsed, m.realtime_ns, m.entropy));
  if (m.frozen && (m.realtime_ns > 0 || !m.entropy.empty()))
    return Invalid("realtime_ns and entropy come with a thaw");
  return m;
}

// ---- init -> daemon

std::string Encode(const ReclaimedMessage& m) {
  if (!m.killed) return "{}";
  return Dump({{"killed", *m.killed}, {"resident_bytes", m.resident_bytes}});
}

Result<ReclaimedMessage> DecodeReclaimed(std::string_view text) {
  auto parsed = ParseObject(text, "kReclaim's kResult");
  if (!parsed) return parsed.error();
  ReclaimedMessage m;
  BH_TRY(ReadOptionalInt(*parsed, "killed", 2, INT32_MAX, m.killed));
  std::optional<uint64_t> resident;
  BH_TRY(ReadOptionalUnsigned(*parsed, "resident_bytes", resident));
  m.resident_bytes = static_cast<int64_t>(resident.value_or(0));
  return m;
}

std::string Encode(const FrozenMessage& m) { return Dump({{"settled", m.settled}}); }

Result<FrozenMessage> DecodeFrozen(std::string_view text) {
  auto parsed = ParseObject(text, "kFreeze's kResult");
  if (!parsed) return parsed.error();
  FrozenMessage m;
  BH_TRY(ReadBool(*parsed, "settled", m.settled));
  return m;
}

std::string Encode(const StreamOffsets& m) { return Dump(OffsetsJson(m)); }

Result<StreamOffsets> DecodeStreamOffsets(std::string_view text) {
  auto parsed = ParseObject(text, "kGap");
  if (!parsed) return parsed.error();
  return OffsetsFrom(*parsed);
}

std::string Encode(const StartedMessage& m) {
  json doc = {{"pid", m.pid}};
  if (m.process) doc["process"] = ToJson(*m.process);
  return Dump(doc);
}

Result<StartedMessage> DecodeStarted(std::string_view text) {
  auto parsed = ParseObject(text, "kStarted");
  if (!parsed) return parsed.error();
  StartedMessage m;
  auto pid = ReadPid(*parsed);
  if (!pid) return pid.error();
  m.pid = *pid;
  if (const json* process = Field(*parsed, "process")) {
    auto p = ProcessFrom(*process);
    if (!p) return p.error();
    m.process = std::move(*p);
  }
  return m;
}

std::string Encode(const ExitMessage& m) {
  auto opt = [](const std::optional<int>& v) { return v ? json(*v) : json(nullptr); };
  return Dump({{"exit_code", opt(m.exit_code)},
               {"signal", opt(m.signal)},
               {"timed_out", m.timed_out},
               {"duration_ms", std::round(m.duration_ms * 1000) / 1000}});
}

Result<ExitMessage> DecodeExit(std::string_view text) {
  auto parsed = ParseObject(text, "kExit");
  if (!parsed) return parsed.error();
  // A field of the wrong type or out of range is left out rather than refused: how a command
  // ended is still reported, and nothing of it trusted.
  ExitMessage m;
  if (!ReadOptionalInt(*parsed, "exit_code", 0, 255, m.exit_code)) m.exit_code.reset();
  if (!ReadOptionalInt(*parsed, "signal", 1, 64, m.signal)) m.signal.reset();
  if (!ReadBool(*parsed, "timed_out", m.timed_out)) m.timed_out = false;
  if (const json* ms = Field(*parsed, "duration_ms"); ms && ms->is_number() && std::isfinite(ms->get<double>()) &&
                                                      ms->get<double>() >= 0)
    m.duration_ms = ms->get<double>();
  return m;
}

ExitMessage ReadExit(std::string_view text) {
  Result<ExitMessage> exit = DecodeExit(text);
  return exit.ok() ? *exit : ExitMessage{};
}

std::string Encode(const AttachedMessage& m) {
  json doc = OffsetsJson(m.start);
  doc["process"] = ToJson(m.process);
  return Dump(doc);
}

Result<AttachedMessage> DecodeAttached(std::string_view text) {
  auto parsed = ParseObject(text, "kAttached");
  if (!parsed) return parsed.error();
  AttachedMessage m;
  auto start = OffsetsFrom(*parsed);
  if (!start) return start.error();
  m.start = *start;
  const json* process = Field(*parsed, "process");
  if (!process) return Invalid("kAttached without a process");
  auto p = ProcessFrom(*process);
  if (!p) return p.error();
  m.process = std::move(*p);
  return m;
}

std::string Encode(const ErrorMessage& m) {
  const char* word = "internal";
  for (const auto& [w, text] : kWords)
    if (w == m.code) word = text;
  return Dump({{"code", word}, {"message", m.message}});
}

Result<ErrorMessage> DecodeError(std::string_view text) {
  auto parsed = ParseObject(text, "kError");
  if (!parsed) return parsed.error();
  // Leniently, as kExit: a field of the wrong type is left out (an unknown word is internal).
  ErrorMessage m;
  std::optional<std::string> code, message;
  if (!ReadOptionalString(*parsed, "code", code)) code.reset();
  if (!ReadOptionalString(*parsed, "message", message)) message.reset();
  for (const auto& [w, word] : kWords)
    if (code == word) m.code = w;
  m.message = message.value_or("");
  return m;
}

std::string Encode(const ProcessList& m) {
  json processes = json::array();
  for (const auto& p : m.processes) processes.push_back(ToJson(p));
  return Dump({{"processes", std::move(processes)}});
}

Result<ProcessList> DecodeProcessList(std::string_view text) {
  auto parsed = ParseObject(text, "kResult");
  if (!parsed) return parsed.error();
  const json* processes = Field(*parsed, "processes");
  if (!processes || !processes->is_array()) return Invalid("kResult without processes");
  ProcessList m;
  for (const json& process : *processes) {
    auto p = ProcessFrom(process);
    if (!p) return p.error();
    m.processes.push_back(std::move(*p));
  }
  return m;
}

}  // namespace bulkhead::ctl
