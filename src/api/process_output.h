// How a background process's output becomes the NDJSON lines of GET .../output. Pure; no I/O.
//
// Offsets count the bytes of one stream since the process started. A data event's "offset"
// is the end of the bytes it carries, so a client that reconnects with the last offset it
// saw gets exactly the rest. Bytes of a UTF-8 character split across frames are held back
// (not yet counted in any offset) until the rest arrives, so text stays text.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/exec_output.h"
#include "common/ctl_messages.h"

namespace bulkhead::api {

enum class OutputStream { kStdout, kStderr };

class ProcessOutputCursor {
 public:
  ProcessOutputCursor(uint64_t requested_stdout, uint64_t requested_stderr);

  // Init's kAttached: the output that follows starts at these offsets. A start beyond the
  // requested offset means the ring dropped those bytes: a gap event says which.
  std::vector<nlohmann::json> Start(uint64_t stdout_start, uint64_t stderr_start);
  // Init's kGap: output continues at these offsets; gap events for the bytes skipped.
  std::vector<nlohmann::json> Skip(uint64_t stdout_offset, uint64_t stderr_offset);
  // A kStdout / kStderr frame: at most one data event.
  std::vector<nlohmann::json> Output(OutputStream stream, std::string_view bytes);
  // At the end (kEnd or kExit): the held-back bytes, as data events.
  std::vector<nlohmann::json> Finish();

  uint64_t stdout_offset() const { return stdout_.received; }
  uint64_t stderr_offset() const { return stderr_.received; }

 private:
  struct Stream {
    Stream(const char* type, uint64_t requested);
    const char* type;
    uint64_t requested;
    uint64_t received = 0;  // end of the bytes read from init, held-back ones included
    OutputEventEncoder encoder;

    // The event for `event` (or nothing), with its offset added.
    void Emit(std::optional<nlohmann::json> event, std::vector<nlohmann::json>& out) const;
    void SkipTo(uint64_t offset, std::vector<nlohmann::json>& out);
  };
  Stream& Of(OutputStream stream) { return stream == OutputStream::kStdout ? stdout_ : stderr_; }

  Stream stdout_;
  Stream stderr_;
};

// {"type": "exit", "exit_code", "signal" (a name, as exec reports it), "duration_ms",
// "timed_out"} from init's kExit.
nlohmann::json ProcessExitEvent(const ctl::ExitMessage& exit);

}  // namespace bulkhead::api
