#include "http/json_text.h"

#include <fmt/format.h>

#include "common/bounded_json.h"
#include "http/encoding.h"

namespace bulkhead::api {

using nlohmann::json;

std::string ErrorCodeOf(const Error& error) {
  return error.detail_code.empty() ? std::string(ErrorName(error.code)) : error.detail_code;
}

json ErrorToJson(const Error& error) {
  return {{"error", {{"code", ErrorCodeOf(error)}, {"message", error.message}}}};
}

namespace {

// Strings this long (command output, mostly) are escaped by AppendJsonString: nlohmann's
// escaper, a byte at a time through a UTF-8 decoder, was most of the daemon's CPU while it
// relayed an output flood.
constexpr size_t kFastStringBytes = 512;

std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string DumpJson(const json& value) {
  if (!value.is_object()) return Dump(value);
  bool has_long_string = false;
  for (const auto& item : value.items()) {
    if (item.value().is_string() && item.value().get_ref<const std::string&>().size() >= kFastStringBytes) {
      has_long_string = true;
    }
  }
  if (!has_long_string) return Dump(value);
  std::string out = "{";
  for (const auto& item : value.items()) {
    if (out.size() > 1) out += ',';
    AppendJsonString(out, item.key());  // keys are ours: always UTF-8
    out += ':';
    const json& member = item.value();
    if (!member.is_string() || !AppendJsonString(out, member.get_ref<const std::string&>())) out += Dump(member);
  }
  out += '}';
  return out;
}

Result<json> ParseJsonObject(std::string_view body) {
  if (body.empty()) return json::object();
  bool too_deep = false;
  json value = ParseBoundedJson(body, &too_deep);
  if (too_deep) {
    return MakeError(ErrorCode::kBadRequest, fmt::format("JSON nested deeper than {}", kMaxJsonDepth));
  }
  if (value.is_discarded()) return MakeError(ErrorCode::kBadRequest, "malformed JSON body");
  if (!value.is_object()) {
    return MakeError(ErrorCode::kInvalid, fmt::format("body must be a JSON object, not {}", value.type_name()));
  }
  return value;
}

}  // namespace bulkhead::api
