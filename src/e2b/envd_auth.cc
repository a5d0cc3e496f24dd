#include "e2b/envd_auth.h"

#include <nettle/hmac.h>
#include <nettle/sha2.h>

#include "common/base64.h"

namespace bulkhead::e2b {
namespace {

std::string Hex(const uint8_t* bytes, size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

}  // namespace

std::string EnvdAccessToken(std::string_view e2b_key, std::string_view sandbox_id) {
  hmac_sha256_ctx ctx;
  hmac_sha256_set_key(&ctx, e2b_key.size(), reinterpret_cast<const uint8_t*>(e2b_key.data()));
  const std::string message = "envd-access-token:" + std::string(sandbox_id);
  hmac_sha256_update(&ctx, message.size(), reinterpret_cast<const uint8_t*>(message.data()));
  uint8_t digest[SHA256_DIGEST_SIZE];
  hmac_sha256_digest(&ctx, sizeof digest, digest);
  return Hex(digest, sizeof digest);
}

std::string FileSignature(std::string_view path, std::string_view operation, std::string_view user,
                          std::string_view token, int64_t expiration) {
  std::string text = std::string(path) + ":" + std::string(operation) + ":" + std::string(user) + ":" +
                     std::string(token);
  if (expiration != 0) text += ":" + std::to_string(expiration);
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, text.size(), reinterpret_cast<const uint8_t*>(text.data()));
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof digest, digest);
  std::string encoded = Base64Encode(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
  while (!encoded.empty() && encoded.back() == '=') encoded.pop_back();
  return "v1_" + encoded;
}

Result<std::optional<std::string>> BasicAuthUser(std::string_view authorization) {
  if (authorization.empty()) return std::optional<std::string>();
  static constexpr std::string_view kScheme = "basic ";
  bool basic = authorization.size() > kScheme.size();
  for (size_t i = 0; basic && i < kScheme.size(); ++i) basic = (authorization[i] | 0x20) == kScheme[i];
  if (!basic) return MakeError(ErrorCode::kUnauthorized, "the Authorization header is not Basic");
  std::string_view encoded = authorization.substr(kScheme.size());
  while (!encoded.empty() && encoded.front() == ' ') encoded.remove_prefix(1);
  while (!encoded.empty() && encoded.back() == ' ') encoded.remove_suffix(1);
  std::optional<std::string> decoded = Base64Decode(encoded);
  if (!decoded) return MakeError(ErrorCode::kUnauthorized, "the Basic credentials are not base64");
  const size_t colon = decoded->find(':');
  std::string user = decoded->substr(0, colon);
  if (user.empty()) return MakeError(ErrorCode::kUnauthorized, "the Basic credentials name no user");
  return std::optional<std::string>(std::move(user));
}

}  // namespace bulkhead::e2b
