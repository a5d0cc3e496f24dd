// Turns the daemon's exec output (NDJSON events, or a whole JSON result) into bytes on
// this terminal's stdout/stderr and, at the end, a shell-style exit code.
#pragma once
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::cli {

// Where a command's output goes (tests pass pipes).
struct OutputFds {
  int stdout_fd = 1;
  int stderr_fd = 2;
};

// How a command ended, as the exit event reports it.
struct CommandOutcome {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
};

// 124 when timed out (like timeout(1)), 128+N when killed by signal N, else the exit code.
int ShellExitCode(const CommandOutcome& outcome);

// A signal from JSON: 9, "9", "SIGKILL" or "KILL"; nullopt for null or unknown.
std::optional<int> SignalFromJson(const nlohmann::json& value);

// A signal as a person writes it: "TERM", "SIGTERM", "sigterm", "15"; nullopt when the
// name is unknown or the number is outside 1..64.
std::optional<int> ParseSignal(std::string_view text);

// The error code of a Status when this terminal's stdout or stderr is closed (EPIPE):
// the command is abandoned quietly, as a shell pipeline expects.
inline constexpr std::string_view kOutputClosed = "output_closed";

// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
Status WriteAll(int fd, std::string_view bytes);

class ExecOutputPrinter {
 public:
  explicit ExecOutputPrinter(OutputFds fds) : fds_(fds) {}

  // One line of the NDJSON stream: start, stdout, stderr, exit or error. Output is
  // written at once (unbuffered) so it appears as the command produces it. An "error"
  // event, or a line that is not an event, becomes an Error.
  Status HandleLine(std::string_view line);
  // The same for an event already parsed.
  Status HandleEvent(const nlohmann::json& event);

  // The non-streaming answer `{"exit_code", "stdout", "stderr", ...}`, for a daemon that
  // answered application/json.
  Status HandleResult(const nlohmann::json& result);

  // Set once the exit event arrived.
  const std::optional<CommandOutcome>& outcome() const { return outcome_; }

 private:
  Status WriteOutput(int fd, const nlohmann::json& event, const char* text_field, const char* b64_field);

  OutputFds fds_;
  std::optional<CommandOutcome> outcome_;
};

// `{"error": {"code", "message"}}`, `{"code", "message"}` or `{"message"}` as an Error.
Error ErrorFromJson(const nlohmann::json& value, ErrorCode fallback_code);

}  // namespace bulkhead::cli
