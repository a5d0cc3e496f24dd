// SHA-256 and HMAC-SHA256 (nettle), and hex: names and tokens the daemon derives from ids.
#pragma once
#include <string>
#include <string_view>

namespace bulkhead {

std::string Sha256(std::string_view data);                               // 32 raw bytes
std::string HmacSha256(std::string_view key, std::string_view message);  // 32 raw bytes
std::string HexEncode(std::string_view bytes);                           // lower-case

}  // namespace bulkhead
