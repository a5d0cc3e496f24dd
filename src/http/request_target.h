// The target of a request: its path and its decoded query parameters.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace bulkhead::api {

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// Splits "/a/b?x=1&y" into path and query. The path is left encoded (MatchRoute decodes
// each segment); the query is decoded ('+' is a space). nullopt if the target is not in
// origin form ("/...").
struct RequestTarget {
  std::string path;
  QueryParams query;
};
std::optional<RequestTarget> ParseTarget(std::string_view target);

// The first value of parameter `name`, or nullptr.
const std::string* QueryParam(const QueryParams& query, std::string_view name);

// Parameter `name` as true/1 or false/0 into out (left as it is when absent); 422 for another value.
Status ReadBoolParam(const QueryParams& query, std::string_view name, bool& out);

// Decodes %XX escapes (and '+' as space if asked). nullopt on a malformed escape.
std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space);

}  // namespace bulkhead::api
