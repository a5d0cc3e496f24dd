// The payload of a kExec frame (ctl_protocol.h), parsed and checked.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bulkhead::init {

struct PtySize {
  uint16_t cols = 80;
  uint16_t rows = 24;
};

struct ExecRequest {
  std::vector<std::string> argv;  // never empty, except for a file operation
  std::vector<std::string> env;   // "K=V" entries, as given
  std::string cwd = "/";
  std::optional<std::string> user;  // absent: init's own uid
  uint64_t timeout_ms = 0;          // 0: no timeout
  bool stdin_enabled = false;       // false: the command's stdin is /dev/null
  bool background = false;          // registered in the process table (ctl_protocol.h)
  bool attach = false;              // background: the connection then follows it, holding (ctl_protocol.h)
  std::optional<std::string> tag;   // background processes only
  std::optional<PtySize> pty;       // run on a new pseudo-terminal
  // Foreground: forward at most this many bytes of each output stream, plus one (which tells
  // the daemon there was more); the rest is read and dropped here (ctl_protocol.h).
  std::optional<uint64_t> output_limit;
  // The command's RLIMIT_NOFILE, soft and hard (absent: init's own).
  std::optional<uint64_t> nofile;
  // A file operation (ctl_protocol.h, "File operations"): the "file_op" object as JSON text.
  // Set instead of argv; run by a forked worker, not an exec.
  std::optional<std::string> file_op;
};

// The payload of a kResize frame.
Result<PtySize> ParsePtySize(std::string_view json_text);

// kInvalid for anything that is not the documented shape. Never throws.
Result<ExecRequest> ParseExecRequest(std::string_view json_text);

// The payload of a kSignal frame: a signal number in 1..64.
Result<int> ParseSignalRequest(std::string_view json_text);

// The "users" of a kSudoUsers frame: at most ctl::kMaxSudoUsers names or uids, each
// non-empty, short and without NUL, ':' or '/'.
Result<std::vector<std::string>> ParseSudoUsersRequest(std::string_view json_text);

}  // namespace bulkhead::init
