// Who may talk to a sandbox's envd surface, and as whom. Each sandbox has an access token
// (the create response's envdAccessToken, sent back as X-Access-Token) derived from the E2B
// key, so nothing is stored and a daemon restart keeps it. /files also accepts URLs signed
// with that token, as the SDKs' uploadUrl/downloadUrl make them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bulkhead::e2b {

// HMAC-SHA256(e2b_key, "envd-access-token:" + sandbox_id) in hex.
std::string EnvdAccessToken(std::string_view e2b_key, std::string_view sandbox_id);

// The SDKs' file URL signature: "v1_" + base64(sha256("path:operation:user:token[:expiration]"))
// without padding. `operation` is "read" or "write"; `expiration` is unix seconds, 0 = none.
std::string FileSignature(std::string_view path, std::string_view operation, std::string_view user,
                          std::string_view token, int64_t expiration);

// The user an "Authorization: Basic base64(user:)" header names; nullopt without the header.
// An error for a header that is not Basic or does not decode.
Result<std::optional<std::string>> BasicAuthUser(std::string_view authorization);

}  // namespace bulkhead::e2b
