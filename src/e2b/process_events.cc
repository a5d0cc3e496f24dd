#include "e2b/process_events.h"

#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "common/base64.h"
#include "e2b/envd_paths.h"

namespace bulkhead::e2b {

using json = nlohmann::json;

namespace {

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message)); }

// A uint32 field as proto3 JSON writes it: a number, or a string of digits.
std::optional<int64_t> ReadUint(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    return n > uint64_t(std::numeric_limits<uint32_t>::max()) ? std::nullopt : std::optional<int64_t>(int64_t(n));
  }
  if (value.is_number_integer()) {
    const int64_t n = value.get<int64_t>();
    return n < 0 ? std::nullopt : std::optional<int64_t>(n);
  }
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    uint32_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
    return n;
  }
  return std::nullopt;
}

// A field that is absent or null reads as absent (proto3 JSON).
const json* Field(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

json StartEvent(int pid) { return {{"event", {{"start", {{"pid", pid}}}}}}; }

json DataEvent(std::string_view stream, std::string_view bytes) {
  return {{"event", {{"data", {{std::string(stream), Base64Encode(bytes)}}}}}};
}

json KeepaliveEvent() { return {{"event", {{"keepalive", json::object()}}}}; }

std::string GoSignalText(int signal) {
  static constexpr std::string_view kNames[] = {
      "",        "hangup",          "interrupt",   "quit",        "illegal instruction",
      "trace/breakpoint trap",      "aborted",     "bus error",   "floating point exception",
      "killed",  "user defined signal 1",          "segmentation fault",
      "user defined signal 2",      "broken pipe", "alarm clock", "terminated"};
  if (signal > 0 && signal < int(std::size(kNames))) return std::string(kNames[signal]);
  return fmt::format("signal {}", signal);
}

json EndEvent(const ctl::ExitMessage& exit) {
  json end = json::object();
  if (exit.signal) {
    const std::string status = "signal: " + GoSignalText(*exit.signal);
    end = {{"exitCode", -1}, {"exited", false}, {"status", status}, {"error", status}};
  } else {
    const int64_t value = exit.exit_code.value_or(-1);
    const std::string status = fmt::format("exit status {}", value);
    end["exited"] = true;
    end["status"] = status;
    if (value != 0) {
      end["exitCode"] = value;
      end["error"] = status;
    }
  }
  return {{"event", {{"end", std::move(end)}}}};
}

std::string ProcessSelector::Describe() const {
  return pid > 0 ? fmt::format("process with pid {}", pid) : fmt::format("process with tag {}", tag);
}

Result<ProcessSelector> ParseSelector(const json& request) {
  const json* process = Field(request, "process");
  if (process == nullptr) return Invalid("process (a ProcessSelector {\"pid\"} or {\"tag\"}) is required");
  if (!process->is_object()) return Invalid("process must be an object {\"pid\": N} or {\"tag\": \"...\"}");
  ProcessSelector selector;
  if (const json* pid = Field(*process, "pid")) {
    std::optional<int64_t> value = ReadUint(*pid);
    if (!value || *value == 0 || *value > std::numeric_limits<int>::max()) {
      return Invalid("process.pid must be a positive integer");
    }
    selector.pid = static_cast<int>(*value);
    return selector;
  }
  if (const json* tag = Field(*process, "tag")) {
    if (!tag->is_string() || tag->get_ref<const std::string&>().empty()) {
      return Invalid("process.tag must be a non-empty string");
    }
    selector.tag = tag->get<std::string>();
    return selector;
  }
  return Invalid("process must select a pid or a tag");
}

Error ProcessNotFoundError(const ProcessSelector& selector) {
  return MakeError(ErrorCode::kNotFound, selector.Describe() + " not found");
}

Result<ProcessInput> ParseProcessInput(const json& input) {
  if (!input.is_object()) return Invalid("input (a ProcessInput {\"stdin\"} or {\"pty\"}) is required");
  ProcessInput result;
  const json* bytes = Field(input, "stdin");
  if (bytes == nullptr) {
    bytes = Field(input, "pty");
    result.pty = true;
  }
  if (bytes == nullptr) return Invalid("input must carry stdin or pty bytes");
  if (!bytes->is_string()) return Invalid("input bytes must be a base64 string");
  std::optional<std::string> decoded = Base64Decode(bytes->get_ref<const std::string&>());
  if (!decoded) return Invalid("input bytes are not valid base64");
  result.bytes = std::move(*decoded);
  return result;
}

Result<int> ParseE2bSignal(const json& signal) {
  int number = -1;
  if (signal.is_string()) {
    const auto& name = signal.get_ref<const std::string&>();
    if (name == "SIGNAL_SIGKILL") number = 9;
    else if (name == "SIGNAL_SIGTERM") number = 15;
    else if (name == "SIGNAL_UNSPECIFIED") number = 0;
    else if (std::optional<int64_t> value = ReadUint(signal)) number = static_cast<int>(std::min<int64_t>(*value, 1000));
    else return Invalid(fmt::format("unknown signal \"{}\"", name.substr(0, 64)));
  } else if (std::optional<int64_t> value = ReadUint(signal)) {
    number = static_cast<int>(std::min<int64_t>(*value, 1000));
  } else if (!signal.is_null()) {
    return Invalid("signal must be a Signal name or number");
  } else {
    number = 0;
  }
  if (number == 9 || number == 15) return number;
  return MakeError(ErrorCode::kMethodNotAllowed, fmt::format("invalid signal: {}", signal.dump()));
}

Result<api::PtySize> ParsePty(const json& pty) {
  if (!pty.is_object()) return Invalid("pty must be an object {\"size\": {\"cols\", \"rows\"}}");
  api::PtySize size;
  const json* wanted = Field(pty, "size");
  if (wanted == nullptr) return size;
  if (!wanted->is_object()) return Invalid("pty.size must be an object {\"cols\", \"rows\"}");
  for (auto [key, out] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    const json* field = Field(*wanted, key);
    if (field == nullptr) continue;
    std::optional<int64_t> value = ReadUint(*field);
    if (!value || *value < 1 || *value > api::kMaxPtySide) {
      return Invalid(fmt::format("pty.size.{} must be an integer from 1 to {}", key, api::kMaxPtySide));
    }
    *out = static_cast<int>(*value);
  }
  return size;
}

Result<StartSpec> ParseStartRequest(const json& request, const std::string& user, const std::string& home,
                                    const std::string& default_cwd) {
  const json* process = Field(request, "process");
  if (process == nullptr || !process->is_object()) return Invalid("process (a ProcessConfig) is required");
  StartSpec spec;
  const json* cmd = Field(*process, "cmd");
  if (cmd == nullptr || !cmd->is_string() || cmd->get_ref<const std::string&>().empty()) {
    return Invalid("process.cmd must be a non-empty string");
  }
  spec.cmd = cmd->get<std::string>();
  json argv = json::array({spec.cmd});
  if (const json* args = Field(*process, "args")) {
    if (!args->is_array()) return Invalid("process.args must be an array of strings");
    for (const json& arg : *args) {
      if (!arg.is_string()) return Invalid("process.args must be an array of strings");
      spec.args.push_back(arg.get<std::string>());
      argv.push_back(arg);
    }
  }
  if (const json* envs = Field(*process, "envs")) {
    if (!envs->is_object()) return Invalid("process.envs must be an object of strings");
    for (const auto& [key, value] : envs->items()) {
      if (!value.is_string()) return Invalid(fmt::format("process.envs.{} must be a string", key.substr(0, 64)));
      spec.envs[key] = value.get<std::string>();
    }
  }
  // envd: the home by default (a template's WORKDIR if it set one); "~" and relative paths
  // taken from the home, as every envd path.
  std::string cwd = default_cwd.empty() ? home : default_cwd;
  if (const json* given = Field(*process, "cwd")) {
    if (!given->is_string()) return Invalid("process.cwd must be a string");
    if (!given->get_ref<const std::string&>().empty()) {
      Result<std::string> resolved = ResolveEnvdPath(given->get<std::string>(), home);
      if (!resolved.ok()) return Invalid("process.cwd: " + resolved.error().message);
      cwd = std::move(*resolved);
    }
  }
  spec.cwd = cwd;

  json body = {{"cmd", std::move(argv)}, {"env", spec.envs}, {"user", user}, {"cwd", cwd}};
  if (const json* tag = Field(request, "tag")) body["tag"] = *tag;
  if (const json* stdin = Field(request, "stdin")) {
    if (!stdin->is_boolean()) return Invalid("stdin must be a boolean");
    spec.stdin = stdin->get<bool>();
  }
  Result<api::ProcessOptions> options = api::ParseProcessOptions(body);
  if (!options.ok()) return Invalid(options.error().message);
  spec.options = std::move(*options);
  if (const json* pty = Field(request, "pty")) {
    Result<api::PtySize> size = ParsePty(*pty);
    if (!size.ok()) return size.error();
    spec.options.pty = *size;
  }
  return spec;
}

RpcError StartError(const Error& error, const std::string& cwd, const std::string& user) {
  if (error.message.starts_with("cwd ")) {
    return {"invalid_argument", fmt::format("cwd '{}' does not exist", cwd)};
  }
  if (error.message.starts_with("user ") && error.code == ErrorCode::kNotFound) {
    return {"unauthenticated", fmt::format("invalid username: '{}'", user)};
  }
  return ToRpcError(error);
}

}  // namespace bulkhead::e2b
