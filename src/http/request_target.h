// The target of a request: its path and its decoded query parameters.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// Decodes %XX escapes (and '+' as space if asked). nullopt on a malformed escape.
std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space);

}  // namespace bulkhead::api
