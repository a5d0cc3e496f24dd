// How a command's output becomes JSON: collected and capped for the one-shot exec result,
// or cut into NDJSON events for the streaming form. Pure; no I/O.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/types.h"

namespace bulkhead::api {

// One stream (stdout or stderr) collected for the JSON result, at most `limit` bytes;
// the rest is dropped (the command keeps running and its output keeps being drained).
class CollectedOutput {
 public:
  explicit CollectedOutput(int64_t limit) : remaining_(limit) {}
  void Append(std::string_view chunk);
  bool truncated() const { return truncated_; }
  // Adds `name` (text; invalid UTF-8 replaced by U+FFFD) and, only when the bytes are not
  // UTF-8, `name`_b64 (the exact bytes). A character cut by the cap is dropped whole.
  void AddTo(nlohmann::json& result, const std::string& name) const;

 private:
  std::string bytes_;
  int64_t remaining_;
  bool truncated_ = false;
};

// One stream cut into NDJSON events {"type": name, "data" | "data_b64": ...}. The bytes
// of a UTF-8 character split across chunks are held back until the rest arrives, so text
// stays text. At most `limit` bytes are sent in all; the rest is dropped.
class OutputEventEncoder {
 public:
  OutputEventEncoder(std::string type, int64_t limit) : type_(std::move(type)), remaining_(limit) {}
  // The event for this chunk, or nullopt if nothing is ready to send.
  std::optional<nlohmann::json> Push(std::string_view chunk);
  // At the end of the stream: the held-back bytes (an unfinished character), if any.
  std::optional<nlohmann::json> Flush();
  bool truncated() const { return truncated_; }
  // Bytes pushed but not yet in an event (the start of a character still incomplete).
  size_t held_back_bytes() const { return held_back_.size(); }

 private:
  nlohmann::json MakeEvent(std::string_view bytes) const;

  std::string type_;
  std::string held_back_;
  int64_t remaining_;
  bool truncated_ = false;
};

// {"exit_code", "signal", "duration_ms", "timed_out", "truncated"}; the common part of the
// JSON result and of the NDJSON "exit" event. "signal" is a name ("SIGKILL") or null.
nlohmann::json ExitFields(const core::ExitStatus& exit, bool truncated);

}  // namespace bulkhead::api
