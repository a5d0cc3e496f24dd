#include "api/exec_output.h"

#include <algorithm>

#include "api/json_output.h"
#include "http/encoding.h"

namespace bulkhead::api {

using nlohmann::json;

void CollectedOutput::Append(std::string_view chunk) {
  const size_t keep = static_cast<size_t>(std::min<int64_t>(remaining_, int64_t(chunk.size())));
  bytes_.append(chunk.substr(0, keep));
  remaining_ -= int64_t(keep);
  if (keep < chunk.size()) truncated_ = true;
}

void CollectedOutput::AddTo(json& result, const std::string& name) const {
  std::string_view bytes = bytes_;
  if (truncated_) bytes.remove_suffix(IncompleteUtf8Suffix(bytes));
  if (IsValidUtf8(bytes)) {
    result[name] = bytes;
  } else {
    result[name] = SanitizeUtf8(bytes);
    result[name + "_b64"] = Base64Encode(bytes);
  }
}

std::optional<json> OutputEventEncoder::Push(std::string_view chunk) {
  const size_t keep = static_cast<size_t>(std::min<int64_t>(remaining_, int64_t(chunk.size())));
  remaining_ -= int64_t(keep);
  if (keep < chunk.size()) truncated_ = true;
  held_back_.append(chunk.substr(0, keep));
  size_t ready = held_back_.size() - IncompleteUtf8Suffix(held_back_);
  // Once the cap is reached nothing will complete a held-back character: drop it.
  if (truncated_) held_back_.resize(ready);
  if (ready == 0) return std::nullopt;
  json event = MakeEvent(std::string_view(held_back_).substr(0, ready));
  held_back_.erase(0, ready);
  return event;
}

std::optional<json> OutputEventEncoder::Flush() {
  if (held_back_.empty()) return std::nullopt;
  json event = MakeEvent(held_back_);
  held_back_.clear();
  return event;
}

json OutputEventEncoder::MakeEvent(std::string_view bytes) const {
  if (IsValidUtf8(bytes)) return {{"type", type_}, {"data", bytes}};
  return {{"type", type_}, {"data_b64", Base64Encode(bytes)}};
}

json ExitFields(const core::ExitStatus& exit, bool truncated) {
  return {
      {"exit_code", exit.exit_code ? json(*exit.exit_code) : json(nullptr)},
      {"signal", exit.signal ? json(SignalName(*exit.signal)) : json(nullptr)},
      {"duration_ms", exit.duration_ms},
      {"timed_out", exit.timed_out},
      {"truncated", truncated},
  };
}

}  // namespace bulkhead::api
