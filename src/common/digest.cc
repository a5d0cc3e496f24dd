#include "common/digest.h"

#include <nettle/hmac.h>

#include <algorithm>

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

Sha256Stream::Sha256Stream() { sha256_init(&ctx_); }

void Sha256Stream::Update(std::string_view data) {
  sha256_update(&ctx_, data.size(), reinterpret_cast<const uint8_t*>(data.data()));
}

std::string Sha256Stream::Digest() {
  std::string digest(SHA256_DIGEST_SIZE, '\0');
  sha256_digest(&ctx_, digest.size(), reinterpret_cast<uint8_t*>(digest.data()));
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

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Walk the longer input entirely; a length difference makes the result false but does
  // not shorten the loop.
  const size_t length = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < length; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string Sha256Digest(std::string_view data) { return "sha256:" + HexEncode(Sha256(data)); }

}  // namespace bulkhead
