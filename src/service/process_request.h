// The requests of the process routes (POST/GET /v1/sandboxes/{id}/processes...), parsed and
// validated. Pure functions, like validate.h and with its conventions: absent or null fields
// take their default, unknown fields are ignored, bad values are 422 naming the field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/types.h"
#include "http/request_target.h"

namespace bulkhead::api {

constexpr size_t kMaxTagChars = 128;
constexpr int kMaxPtySide = 10000;

struct PtySize {
  int cols = 80;
  int rows = 24;
};

// POST /v1/sandboxes/{id}/processes.
struct ProcessOptions {
  core::ExecRequest request;  // argv, cwd, env, user as for exec; timeout_s defaults to 0 (none)
  std::optional<std::string> tag;
  std::optional<PtySize> pty;
  // A lifetime finer than request.timeout_s (the E2B front's Connect-Timeout-Ms); wins over it.
  std::optional<uint64_t> timeout_ms;
};
Result<ProcessOptions> ParseProcessOptions(const nlohmann::json& body);

// 1..128 characters, no control characters, and not all digits (that would read as a pid).
bool IsValidTag(std::string_view tag);

// The {pid} segment of a process route: a decimal pid or a tag.
struct ProcessRef {
  int pid = 0;      // > 0 when the segment is a number
  std::string tag;  // otherwise
};
// nullopt if the segment cannot name any process (pid 0, out of range, an invalid tag).
std::optional<ProcessRef> ParseProcessRef(std::string_view segment);

// ?offset=N&stdout_offset=N&stderr_offset=N&follow=true|false (output and attach).
// `offset` sets both streams; the specific ones override it.
struct OutputQuery {
  uint64_t stdout_offset = 0;
  uint64_t stderr_offset = 0;
  bool follow = false;
};
Result<OutputQuery> ParseOutputQuery(const QueryParams& query);

// POST .../stdin: {"data": "text"} or {"data_b64": "..."}; the decoded bytes (at most 16 MiB).
Result<std::string> ParseStdinBody(const nlohmann::json& body);
// POST .../signal: {"signal": "SIGTERM" | "TERM" | 15}.
Result<int> ParseSignalBody(const nlohmann::json& body);
// POST .../resize and the WebSocket's resize message: {"cols", "rows"}, both required.
Result<PtySize> ParseResize(const nlohmann::json& body);

}  // namespace bulkhead::api
