#include "common/bounded_json.h"

namespace bulkhead {

nlohmann::json ParseBoundedJson(std::string_view text, bool* too_deep) {
  using json = nlohmann::json;
  bool deep = false;
  // Refuse deep nesting while parsing, so a deep tree is never built.
  json::parser_callback_t limit_depth = [&deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      deep = true;
      return false;
    }
    return !deep;
  };
  json value = json::parse(text, limit_depth, /*allow_exceptions=*/false);
  if (too_deep) *too_deep = deep;
  if (deep) return json(json::value_t::discarded);
  return value;
}

}  // namespace bulkhead
