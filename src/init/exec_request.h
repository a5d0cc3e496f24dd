// The payload of a kExec frame (ctl_protocol.h), parsed and checked.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bulkhead::init {

struct ExecRequest {
  std::vector<std::string> argv;  // never empty
  std::vector<std::string> env;   // "K=V" entries, as given
  std::string cwd = "/";
  std::optional<std::string> user;  // absent: init's own uid
  uint64_t timeout_ms = 0;          // 0: no timeout
  bool stdin_enabled = false;       // false: the command's stdin is /dev/null
};

// kInvalid for anything that is not the documented shape. Never throws.
Result<ExecRequest> ParseExecRequest(std::string_view json_text);

// The payload of a kSignal frame: a signal number in 1..64.
Result<int> ParseSignalRequest(std::string_view json_text);

}  // namespace bulkhead::init
