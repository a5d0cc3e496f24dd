// Byte encodings at the JSON edge: base64 for bytes that may not be UTF-8 (`*_b64`
// fields), and UTF-8 checks so command output is never emitted as invalid JSON text.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead::api {

// Standard base64 (RFC 4648 section 4) with '=' padding.
std::string Base64Encode(std::string_view bytes);

// Decodes standard base64. Padding is optional; whitespace and the URL-safe alphabet are
// rejected, as is any non-zero bit left over in the last symbol. nullopt if invalid.
std::optional<std::string> Base64Decode(std::string_view text);

// The number of bytes Base64Decode would produce for `text`, computed without decoding,
// so a caller can refuse an oversized payload before allocating it.
size_t Base64DecodedSize(std::string_view text);

// True if `bytes` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD (the WHATWG /
// Unicode "substitution of maximal subparts" practice).
std::string SanitizeUtf8(std::string_view bytes);

// Length of a trailing, incomplete but so far well-formed UTF-8 sequence (0..3). Output
// arrives in arbitrary chunks; the caller holds these bytes back until the next chunk so a
// character split across two reads is not mistaken for invalid UTF-8.
size_t IncompleteUtf8Suffix(std::string_view bytes);

}  // namespace bulkhead::api
