#include "init/exec_request.h"

#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"

namespace bulkhead::init {
namespace {

using nlohmann::json;

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kInvalid, message); }

// execve() cannot carry a NUL inside a string; JSON can ("\u0000").
bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

Result<json> ParseObject(std::string_view json_text) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Invalid("payload is not a JSON object");
  return doc;
}

Result<std::vector<std::string>> StringArray(const json& doc, const char* key) {
  std::vector<std::string> out;
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return out;
  if (!it->is_array()) return Invalid(std::string(key) + " must be an array of strings");
  for (const auto& item : *it) {
    if (!item.is_string()) return Invalid(std::string(key) + " must be an array of strings");
    out.push_back(item.get<std::string>());
    if (HasNul(out.back())) return Invalid(std::string(key) + " contains a NUL byte");
  }
  return out;
}

}  // namespace

Result<ExecRequest> ParseExecRequest(std::string_view json_text) {
  auto parsed = ParseObject(json_text);
  if (!parsed.ok()) return parsed.error();
  const json& doc = *parsed;
  ExecRequest request;

  if (auto it = doc.find("file_op"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return Invalid("file_op must be an object");
    if (doc.contains("argv")) return Invalid("a file operation has no argv");
    request.file_op = it->dump();
  } else {
    auto argv = StringArray(doc, "argv");
    if (!argv.ok()) return argv.error();
    if (argv->empty() || (*argv)[0].empty()) return Invalid("argv must name a program");
    request.argv = std::move(*argv);
  }

  auto env = StringArray(doc, "env");
  if (!env.ok()) return env.error();
  for (const auto& entry : *env) {
    if (entry.find('=') == std::string::npos || entry[0] == '=') return Invalid("env entry \"" + entry + "\" is not K=V");
  }
  request.env = std::move(*env);

  if (auto it = doc.find("cwd"); it != doc.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty()) return Invalid("cwd must be a non-empty string");
    request.cwd = it->get<std::string>();
    if (HasNul(request.cwd)) return Invalid("cwd contains a NUL byte");
  }
  if (auto it = doc.find("user"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return Invalid("user must be a string");
    if (!it->get<std::string>().empty()) request.user = it->get<std::string>();
  }
  if (auto it = doc.find("timeout_ms"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_unsigned()) return Invalid("timeout_ms must be a non-negative integer");
    request.timeout_ms = it->get<uint64_t>();
  }
  if (auto it = doc.find("output_limit"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_unsigned()) return Invalid("output_limit must be a non-negative integer");
    request.output_limit = it->get<uint64_t>();
  }
  if (auto it = doc.find("nofile"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0) return Invalid("nofile must be a positive integer");
    request.nofile = it->get<uint64_t>();
  }
  if (auto it = doc.find("stdin"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return Invalid("stdin must be a boolean");
    request.stdin_enabled = it->get<bool>();
  }
  if (auto it = doc.find("background"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return Invalid("background must be a boolean");
    request.background = it->get<bool>();
  }
  if (auto it = doc.find("attach"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return Invalid("attach must be a boolean");
    request.attach = it->get<bool>();
  }
  if (auto it = doc.find("tag"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return Invalid("tag must be a string");
    request.tag = it->get<std::string>();
  }
  if (auto it = doc.find("pty"); it != doc.end() && !it->is_null()) {
    auto size = ParsePtySize(it->dump());
    if (!size.ok()) return size.error();
    request.pty = *size;
  }
  if (request.file_op && (request.background || request.pty)) {
    return Invalid("a file operation runs in the foreground without a pty");
  }
  return request;
}

Result<PtySize> ParsePtySize(std::string_view json_text) {
  auto parsed = ParseObject(json_text);
  if (!parsed.ok()) return parsed.error();
  PtySize size;
  for (auto [key, field] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    auto it = parsed->find(key);
    if (it == parsed->end() || it->is_null()) continue;
    if (!it->is_number_unsigned() || it->get<uint64_t>() < 1 || it->get<uint64_t>() > 10000) {
      return Invalid(std::string("pty ") + key + " must be an integer in 1..10000");
    }
    *field = uint16_t(it->get<uint64_t>());
  }
  return size;
}

Result<int> ParseSignalRequest(std::string_view json_text) {
  auto parsed = ParseObject(json_text);
  if (!parsed.ok()) return parsed.error();
  auto it = parsed->find("signal");
  if (it == parsed->end() || !it->is_number_integer()) return Invalid("signal must be an integer");
  int64_t signal = it->get<int64_t>();
  if (signal < 1 || signal > 64) return Invalid("signal must be in 1..64");
  return int(signal);
}

Result<std::vector<std::string>> ParseSudoUsersRequest(std::string_view json_text) {
  constexpr size_t kMaxUserBytes = 256;
  auto parsed = ParseObject(json_text);
  if (!parsed.ok()) return parsed.error();
  if (!parsed->contains("users")) return Invalid("users must be an array of user names or uids");
  auto users = StringArray(*parsed, "users");
  if (!users.ok()) return users.error();
  if (users->size() > ctl::kMaxSudoUsers) return Invalid("too many sudo users");
  for (const auto& user : *users) {
    if (user.empty() || user.size() > kMaxUserBytes || user.find_first_of(":/") != std::string::npos)
      return Invalid("a sudo user must be a user name or a uid");
  }
  return std::move(*users);
}

}  // namespace bulkhead::init
