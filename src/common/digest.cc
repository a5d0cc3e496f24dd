#include "common/digest.h"

#include <nettle/hmac.h>
#include <nettle/sha2.h>

namespace bulkhead {

std::string Sha256(std::string_view data) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, data.size(), reinterpret_cast<const uint8_t*>(data.data()));
  std::string digest(SHA256_DIGEST_SIZE, '\0');
  sha256_digest(&ctx, digest.size(), reinterpret_cast<uint8_t*>(digest.data()));
  return digest;
}

std::string HmacSha256(std::string_view key, std::string_view message) {
  hmac_sha256_ctx ctx;
  hmac_sha256_set_key(&ctx, key.size(), reinterpret_cast<const uint8_t*>(key.data()));
  hmac_sha256_update(&ctx, message.size(), reinterpret_cast<const uint8_t*>(message.data()));
  std::string digest(SHA256_DIGEST_SIZE, '\0');
  hmac_sha256_digest(&ctx, digest.size(), reinterpret_cast<uint8_t*>(digest.data()));
  return digest;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace bulkhead
