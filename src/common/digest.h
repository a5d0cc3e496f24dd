// SHA-256 and HMAC-SHA256 (nettle), and hex: names and tokens the daemon derives from ids.
#pragma once
#include <nettle/sha2.h>

#include <string>
#include <string_view>

namespace bulkhead {

std::string Sha256(std::string_view data);                               // 32 raw bytes
std::string HmacSha256(std::string_view key, std::string_view message);  // 32 raw bytes
std::string HexEncode(std::string_view bytes);                           // lower-case
// "sha256:" and the lower-case hex of data's SHA-256: an OCI content digest.
std::string Sha256Digest(std::string_view data);

// Equality without an early exit, so response time does not reveal a key's prefix.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// SHA-256 of data given in pieces.
class Sha256Stream {
 public:
  Sha256Stream();
  void Update(std::string_view data);
  std::string Digest();  // 32 raw bytes; the stream starts again after it

 private:
  sha256_ctx ctx_;
};

}  // namespace bulkhead
