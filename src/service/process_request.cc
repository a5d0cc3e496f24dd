#include "service/process_request.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "http/encoding.h"
#include "service/signal_names.h"
#include "service/validate.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message)); }

const json* Find(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer field in [min, max]; an exact float (80.0) is accepted as some clients send them.
Result<int64_t> ReadInt(const json& value, std::string_view key, int64_t min, int64_t max) {
  const Error range = Invalid(fmt::format("{} must be an integer between {} and {}", key, min, max));
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(max)) return range;
    v = static_cast<int64_t>(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) return Invalid(fmt::format("{} must be an integer", key));
    if (d < static_cast<double>(min) || d > static_cast<double>(max)) return range;
    v = static_cast<int64_t>(d);
  } else {
    return Invalid(fmt::format("{} must be an integer, not {}", key, value.type_name()));
  }
  if (v < min || v > max) return range;
  return v;
}

Result<PtySize> ReadPtySize(const json& object, std::string_view prefix, bool required) {
  PtySize size;
  for (auto [key, field] : {std::pair{"cols", &size.cols}, std::pair{"rows", &size.rows}}) {
    const std::string name = fmt::format("{}{}", prefix, key);
    const json* value = Find(object, key);
    if (value == nullptr) {
      if (required) return Invalid(fmt::format("{} is required", name));
      continue;
    }
    Result<int64_t> n = ReadInt(*value, name, 1, kMaxPtySide);
    if (!n.ok()) return n.error();
    *field = static_cast<int>(*n);
  }
  return size;
}

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A decimal query value; at most INT64_MAX so it survives every JSON reader.
std::optional<uint64_t> ParseOffset(std::string_view text) {
  if (!AllDigits(text) || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) value = value * 10 + uint64_t(c - '0');
  if (value > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return value;
}

}  // namespace

Result<ProcessOptions> ParseProcessOptions(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  // cmd, cwd, env and user follow exec's rules exactly: let exec's parser read them.
  json command = json::object();
  for (const char* key : {"cmd", "cwd", "env", "user"}) {
    if (auto it = body.find(key); it != body.end()) command[key] = *it;
  }
  Result<ExecOptions> exec = ParseExecOptions(command);
  if (!exec.ok()) return exec.error();

  ProcessOptions options;
  options.request = std::move(exec->request);
  options.request.timeout_s = 0;  // a background process runs until it ends unless asked
  if (const json* timeout = Find(body, "timeout_s")) {
    Result<int64_t> seconds = ReadInt(*timeout, "timeout_s", 0, kMaxLifetimeS);
    if (!seconds.ok()) return seconds.error();
    options.request.timeout_s = *seconds;
  }
  if (const json* tag = Find(body, "tag")) {
    if (!tag->is_string()) return Invalid(fmt::format("tag must be a string, not {}", tag->type_name()));
    const auto& text = tag->get_ref<const std::string&>();
    if (!IsValidTag(text)) {
      return Invalid(fmt::format("tag must be 1 to {} characters without control characters, and not only digits",
                                 kMaxTagChars));
    }
    options.tag = text;
  }
  if (const json* pty = Find(body, "pty")) {
    if (!pty->is_object()) return Invalid(fmt::format("pty must be an object {{\"cols\", \"rows\"}}, not {}", pty->type_name()));
    Result<PtySize> size = ReadPtySize(*pty, "pty.", /*required=*/false);
    if (!size.ok()) return size.error();
    options.pty = *size;
  }
  return options;
}

bool IsValidTag(std::string_view tag) {
  if (tag.empty() || AllDigits(tag) || !IsValidUtf8(tag)) return false;
  size_t chars = 0;
  for (unsigned char c : tag) {
    if (c < 0x20 || c == 0x7f) return false;
    if ((c & 0xc0) != 0x80) ++chars;  // count lead bytes: one per character
  }
  return chars <= kMaxTagChars;
}

std::optional<ProcessRef> ParseProcessRef(std::string_view segment) {
  ProcessRef ref;
  if (AllDigits(segment)) {
    std::optional<uint64_t> pid = ParseOffset(segment);
    if (!pid || *pid == 0 || *pid > uint64_t(std::numeric_limits<int>::max())) return std::nullopt;
    ref.pid = static_cast<int>(*pid);
    return ref;
  }
  if (!IsValidTag(segment)) return std::nullopt;
  ref.tag = std::string(segment);
  return ref;
}

Result<OutputQuery> ParseOutputQuery(const QueryParams& query) {
  OutputQuery result;
  std::optional<uint64_t> both, out, err;
  for (const auto& [key, value] : query) {
    std::optional<uint64_t>* target = key == "offset"          ? &both
                                      : key == "stdout_offset" ? &out
                                      : key == "stderr_offset" ? &err
                                                               : nullptr;
    if (target != nullptr) {
      *target = ParseOffset(value);
      if (!*target) return Invalid(fmt::format("{} must be a non-negative integer", key));
    }
    // Other parameters are ignored, like unknown JSON fields.
  }
  if (Status ok = ReadBoolParam(query, "follow", result.follow); !ok.ok()) return ok.error();
  result.stdout_offset = out.value_or(both.value_or(0));
  result.stderr_offset = err.value_or(both.value_or(0));
  return result;
}

Result<std::string> ParseStdinBody(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  const json* text = Find(body, "data");
  const json* b64 = Find(body, "data_b64");
  if (text && b64) return Invalid("give data or data_b64, not both");
  if (!text && !b64) return Invalid("data or data_b64 is required");
  if (text) {
    if (!text->is_string()) return Invalid(fmt::format("data must be a string, not {}", text->type_name()));
    const auto& bytes = text->get_ref<const std::string&>();
    if (bytes.size() > kMaxStdinBytes) return Invalid(fmt::format("data exceeds {} bytes", kMaxStdinBytes));
    return bytes;
  }
  if (!b64->is_string()) return Invalid(fmt::format("data_b64 must be a string, not {}", b64->type_name()));
  const auto& encoded = b64->get_ref<const std::string&>();
  if (Base64DecodedSize(encoded) > kMaxStdinBytes) {
    return Invalid(fmt::format("data_b64 decodes to more than {} bytes", kMaxStdinBytes));
  }
  std::optional<std::string> decoded = Base64Decode(encoded);
  if (!decoded) return Invalid("data_b64 is not valid base64");
  return std::move(*decoded);
}

Result<int> ParseSignalBody(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  auto it = body.find("signal");
  return ParseSignal(it == body.end() ? json(nullptr) : *it, "signal");
}

Result<PtySize> ParseResize(const json& body) {
  if (!body.is_object()) return Invalid("body must be a JSON object");
  return ReadPtySize(body, "", /*required=*/true);
}

}  // namespace bulkhead::api
