#include "service/signal_names.h"

#include <signal.h>

#include <array>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace bulkhead::api {
namespace {

constexpr int kMaxSignal = 64;

// Names without the "SIG" prefix; aliases (IOT, CLD, POLL) map to the same number.
const std::array<std::pair<std::string_view, int>, 34> kSignals = {{
    {"HUP", SIGHUP},     {"INT", SIGINT},       {"QUIT", SIGQUIT},   {"ILL", SIGILL},   {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT},   {"IOT", SIGIOT},       {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL},
    {"USR1", SIGUSR1},   {"SEGV", SIGSEGV},     {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},
    {"TERM", SIGTERM},   {"STKFLT", SIGSTKFLT}, {"CHLD", SIGCHLD},   {"CLD", SIGCHLD},  {"CONT", SIGCONT},
    {"STOP", SIGSTOP},   {"TSTP", SIGTSTP},     {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU}, {"URG", SIGURG},
    {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},       {"POLL", SIGPOLL},     {"PWR", SIGPWR},     {"SYS", SIGSYS},
}};

std::optional<int> SmallNumber(std::string_view digits) {
  if (digits.empty() || digits.size() > 2) return std::nullopt;
  int n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

bool InRange(int signal) { return signal >= 1 && signal <= kMaxSignal; }

}  // namespace

std::optional<int> SignalNumber(std::string_view name) {
  if (name.empty() || name.size() > 16) return std::nullopt;
  std::string upper(name);
  for (char& c : upper) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  std::string_view rest = upper;
  if (auto number = SmallNumber(rest)) return InRange(*number) ? number : std::nullopt;
  if (rest.starts_with("SIG")) rest.remove_prefix(3);
  for (const auto& [known, number] : kSignals) {
    if (rest == known) return number;
  }
  // Real-time signals, numbered as SignalName prints them ("SIGRTMIN+2").
  std::optional<int> signal;
  if (rest == "RTMIN") signal = SIGRTMIN;
  if (rest == "RTMAX") signal = SIGRTMAX;
  if (rest.starts_with("RTMIN+")) {
    if (auto n = SmallNumber(rest.substr(6))) signal = SIGRTMIN + *n;
  }
  if (rest.starts_with("RTMAX-")) {
    if (auto n = SmallNumber(rest.substr(6))) signal = SIGRTMAX - *n;
  }
  if (signal && *signal >= SIGRTMIN && *signal <= SIGRTMAX && InRange(*signal)) return signal;
  return std::nullopt;
}

Result<int> ParseSignal(const nlohmann::json& value, std::string_view field) {
  if (value.is_number_integer()) {  // signed or unsigned
    const bool in_range = value.is_number_unsigned()
                              ? value.get<uint64_t>() >= 1 && value.get<uint64_t>() <= uint64_t(kMaxSignal)
                              : value.get<int64_t>() >= 1 && value.get<int64_t>() <= kMaxSignal;
    if (!in_range) {
      return MakeError(ErrorCode::kInvalid, fmt::format("{} must be between 1 and {}", field, kMaxSignal));
    }
    return static_cast<int>(value.get<int64_t>());
  }
  if (value.is_string()) {
    const auto& name = value.get_ref<const std::string&>();
    if (auto number = SignalNumber(name)) return *number;
    return MakeError(ErrorCode::kInvalid,
                     fmt::format("{}: unknown signal \"{}\" (use a name like SIGTERM or TERM, or a number 1..{})",
                                 field, name.substr(0, 32), kMaxSignal));
  }
  if (value.is_null()) return MakeError(ErrorCode::kInvalid, fmt::format("{} is required", field));
  return MakeError(ErrorCode::kInvalid,
                   fmt::format("{} must be a signal name or number, not {}", field, value.type_name()));
}

}  // namespace bulkhead::api
