// Base64 (RFC 4648, standard alphabet, padded) for the API's `_b64` fields.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead::cli {

std::string Base64Encode(std::string_view bytes);

// nullopt when `text` is not valid padded base64 (ASCII whitespace is skipped).
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace bulkhead::cli
