#include "common/base64.h"

#include <array>
#include <cstdint>

namespace bulkhead {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Maps a byte to its 6-bit value, or -1 if it is not in the standard alphabet.
constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = -1;
  for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecodeTable = MakeDecodeTable();

std::string_view StripPadding(std::string_view text) {
  // At most two '=' are padding; more is malformed and left for the decoder to reject.
  for (int i = 0; i < 2 && !text.empty() && text.back() == '='; ++i) text.remove_suffix(1);
  return text;
}
}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) |
                       uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest == 1) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

size_t Base64DecodedSize(std::string_view text) {
  text = StripPadding(text);
  const size_t rest = text.size() % 4;
  return text.size() / 4 * 3 + (rest == 2 ? 1 : rest == 3 ? 2 : 0);
}

std::optional<std::string> Base64Decode(std::string_view text) {
  const size_t full_size = text.size();
  text = StripPadding(text);
  // Padding, when present, must complete the last quantum exactly ("QQ=" is malformed).
  if (full_size != text.size() && full_size % 4 != 0) return std::nullopt;
  if (text.size() % 4 == 1) return std::nullopt;

  std::string out;
  out.reserve(Base64DecodedSize(text));
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int8_t v = kDecodeTable[static_cast<uint8_t>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  // Leftover bits must be zero: otherwise two different texts would decode alike.
  if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

}  // namespace bulkhead
