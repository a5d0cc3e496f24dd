#include "cli/base64.h"

#include <array>
#include <cstdint>

namespace bulkhead::cli {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// -1 for bytes outside the alphabet.
constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> table{};
  for (auto& entry : table) entry = -1;
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecodeTable = MakeDecodeTable();

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t group = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) |
                     uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += kAlphabet[(group >> 6) & 63];
    out += kAlphabet[group & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t group = uint32_t(uint8_t(bytes[i])) << 16;
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    uint32_t group = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += kAlphabet[(group >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t group = 0;
  int sextets = 0;   // sextets collected in `group`
  int padding = 0;   // '=' seen; only allowed at the very end
  for (char c : text) {
    if (IsSpace(c)) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding > 0) return std::nullopt;  // data after padding
    int value = kDecodeTable[static_cast<unsigned char>(c)];
    if (value < 0) return std::nullopt;
    group = (group << 6) | uint32_t(value);
    if (++sextets == 4) {
      out += char((group >> 16) & 0xff);
      out += char((group >> 8) & 0xff);
      out += char(group & 0xff);
      group = 0;
      sextets = 0;
    }
  }
  // A final partial group of 2 or 3 sextets carries 1 or 2 bytes and needs 2 or 1 '='.
  if (sextets == 0) return padding == 0 ? std::optional(out) : std::nullopt;
  if (sextets == 1 || sextets + padding != 4) return std::nullopt;
  if (sextets == 2) {
    out += char((group >> 4) & 0xff);
  } else {
    out += char((group >> 10) & 0xff);
    out += char((group >> 2) & 0xff);
  }
  return out;
}

}  // namespace bulkhead::cli
