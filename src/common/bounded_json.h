// JSON from a peer that may be hostile (an API client, a sandbox's init). nlohmann's parser
// does not recurse, but copying, dumping and comparing a document do, once per level: 1 MiB
// of '[' would overflow the stack of whoever copies it. These parsers stop at a depth.
#pragma once
#include <string_view>

#include <nlohmann/json.hpp>

namespace bulkhead {

constexpr int kMaxJsonDepth = 64;

// `text` parsed, or a discarded value if it is malformed or nests deeper than kMaxJsonDepth
// (then *too_deep is set, if given).
nlohmann::json ParseBoundedJson(std::string_view text, bool* too_deep = nullptr);

}  // namespace bulkhead
