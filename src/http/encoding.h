// UTF-8 checks at the JSON edge, so command output is never emitted as invalid JSON text
// (bytes that are not UTF-8 travel as base64 in `*_b64` fields: common/base64.h).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/base64.h"

namespace bulkhead::api {

// True if `bytes` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD (the WHATWG /
// Unicode "substitution of maximal subparts" practice).
std::string SanitizeUtf8(std::string_view bytes);

// Length of a trailing, incomplete but so far well-formed UTF-8 sequence (0..3). Output
// arrives in arbitrary chunks; the caller holds these bytes back until the next chunk so a
// character split across two reads is not mistaken for invalid UTF-8.
size_t IncompleteUtf8Suffix(std::string_view bytes);

// Appends `bytes` to `out` as a JSON string literal, quotes included, escaped exactly as
// nlohmann's dump() escapes (so the fast path and the library agree byte for byte); false,
// with `out` unchanged, if the bytes are not well-formed UTF-8.
bool AppendJsonString(std::string& out, std::string_view bytes);

}  // namespace bulkhead::api
