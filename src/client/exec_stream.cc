#include "client/exec_stream.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/base64.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

constexpr std::pair<const char*, int> kSignalNames[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT},   {"ILL", SIGILL},   {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},     {"KILL", SIGKILL}, {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},   {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP},   {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU}, {"URG", SIGURG},     {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM},
    {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},       {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

std::optional<int> OptionalInt(const json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int>();
}

bool BoolField(const json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

CommandOutcome OutcomeFromJson(const json& object) {
  CommandOutcome outcome;
  outcome.exit_code = OptionalInt(object, "exit_code");
  if (auto it = object.find("signal"); it != object.end()) outcome.signal = SignalFromJson(*it);
  outcome.timed_out = BoolField(object, "timed_out");
  return outcome;
}

Error MalformedStream(std::string why) {
  return MakeError(ErrorCode::kInternal, "malformed exec stream from the daemon: " + why, "bad_response");
}

}  // namespace

int ShellExitCode(const CommandOutcome& outcome) {
  if (outcome.timed_out) return 124;
  if (outcome.signal && *outcome.signal > 0) return 128 + *outcome.signal;
  if (outcome.exit_code) return *outcome.exit_code & 0xff;
  return 1;  // neither an exit code nor a signal: something went wrong
}

std::optional<int> SignalFromJson(const json& value) {
  if (value.is_number_integer()) return value.get<int>();
  if (!value.is_string()) return std::nullopt;
  std::string name = value.get<std::string>();
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos && name.size() < 4) {
    return std::stoi(name);
  }
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (const auto& [signal_name, number] : kSignalNames) {
    if (name == signal_name) return number;
  }
  return std::nullopt;
}

std::optional<int> ParseSignal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    if (text.size() > 2) return std::nullopt;
    int number = std::stoi(std::string(text));
    if (number < 1 || number > 64) return std::nullopt;
    return number;
  }
  std::string name;
  for (char c : text) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (const auto& [signal_name, number] : kSignalNames) {
    if (name == signal_name) return number;
  }
  return std::nullopt;
}

Status WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) return MakeError(ErrorCode::kInternal, "output closed", std::string(kOutputClosed));
      return SystemError("writing output", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return {};
}

Error ErrorFromJson(const json& value, ErrorCode fallback_code) {
  const json* object = &value;
  if (auto it = value.find("error"); it != value.end() && it->is_object()) object = &*it;
  std::string code = "error";
  std::string message = "unknown error";
  if (auto it = object->find("code"); it != object->end() && it->is_string()) code = it->get<std::string>();
  if (auto it = object->find("message"); it != object->end() && it->is_string()) {
    message = it->get<std::string>();
  } else if (auto it = value.find("error"); it != value.end() && it->is_string()) {
    message = it->get<std::string>();  // {"type":"error","error":"text"}
  }
  return MakeError(fallback_code, message, code);
}

Status ExecOutputPrinter::WriteOutput(int fd, const json& event, const char* text_field, const char* b64_field) {
  // The exact bytes when given; the text form may have had invalid UTF-8 replaced.
  if (auto it = event.find(b64_field); it != event.end() && it->is_string()) {
    std::optional<std::string> bytes = Base64Decode(it->get_ref<const std::string&>());
    if (!bytes) return MalformedStream(std::string("invalid base64 in ") + b64_field);
    return WriteAll(fd, *bytes);
  }
  if (auto it = event.find(text_field); it != event.end() && it->is_string()) {
    return WriteAll(fd, it->get_ref<const std::string&>());
  }
  return {};  // no output in this event
}

Status ExecOutputPrinter::HandleLine(std::string_view line) {
  json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded() || !event.is_object()) return MalformedStream("a line is not a JSON object");
  return HandleEvent(event);
}

Status ExecOutputPrinter::HandleEvent(const json& event) {
  auto type_it = event.find("type");
  if (type_it == event.end() || !type_it->is_string()) return MalformedStream("an event has no type");
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type == "stdout") return WriteOutput(fds_.stdout_fd, event, "data", "data_b64");
  if (type == "stderr") return WriteOutput(fds_.stderr_fd, event, "data", "data_b64");
  if (type == "exit") {
    outcome_ = OutcomeFromJson(event);
    return {};
  }
  if (type == "error") return ErrorFromJson(event, ErrorCode::kInternal);
  return {};  // "start" and event types added later carry nothing to print
}

Status ExecOutputPrinter::HandleResult(const json& result) {
  if (!result.is_object()) return MalformedStream("the exec result is not a JSON object");
  BH_TRY(WriteOutput(fds_.stdout_fd, result, "stdout", "stdout_b64"));
  BH_TRY(WriteOutput(fds_.stderr_fd, result, "stderr", "stderr_b64"));
  outcome_ = OutcomeFromJson(result);
  return {};
}

}  // namespace bulkhead::cli
