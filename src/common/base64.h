// Base64 (RFC 4648 section 4) for the API's `*_b64` fields: bytes that may not be UTF-8.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead {

// Standard base64 (RFC 4648 section 4) with '=' padding.
std::string Base64Encode(std::string_view bytes);

// Decodes standard base64. Padding is optional; whitespace and the URL-safe alphabet are
// rejected, as is any non-zero bit left over in the last symbol. nullopt if invalid.
std::optional<std::string> Base64Decode(std::string_view text);

// The number of bytes Base64Decode would produce for `text`, computed without decoding,
// so a caller can refuse an oversized payload before allocating it.
size_t Base64DecodedSize(std::string_view text);

}  // namespace bulkhead
