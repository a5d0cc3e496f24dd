#include "e2b/envd_auth.h"

#include "common/base64.h"
#include "common/digest.h"

namespace bulkhead::e2b {

std::string EnvdAccessToken(std::string_view e2b_key, std::string_view sandbox_id) {
  return HexEncode(HmacSha256(e2b_key, "envd-access-token:" + std::string(sandbox_id)));
}

std::string FileSignature(std::string_view path, std::string_view operation, std::string_view user,
                          std::string_view token, int64_t expiration) {
  std::string text = std::string(path) + ":" + std::string(operation) + ":" + std::string(user) + ":" +
                     std::string(token);
  if (expiration != 0) text += ":" + std::to_string(expiration);
  std::string encoded = Base64Encode(Sha256(text));
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
