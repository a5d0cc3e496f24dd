#include "api/encoding.h"

#include <array>
#include <cstdint>

namespace bulkhead::api {
namespace {

// How the UTF-8 sequence starting at s[i] looks (Unicode table 3-7).
struct Utf8Scan {
  size_t length;    // bytes of a complete character, or of the maximal ill-formed subpart
  bool complete;    // a well-formed character
  bool cut_by_end;  // well-formed so far, but the input ended before the character did
};

Utf8Scan ScanUtf8(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {1, true, false};
  size_t continuation_bytes = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    continuation_bytes = 1;
  } else if (b0 == 0xE0) {
    continuation_bytes = 2, lo = 0xA0;  // no overlongs
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    continuation_bytes = 2;
  } else if (b0 == 0xED) {
    continuation_bytes = 2, hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    continuation_bytes = 3, lo = 0x90;  // no overlongs
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    continuation_bytes = 3;
  } else if (b0 == 0xF4) {
    continuation_bytes = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {1, false, false};  // a continuation byte or a byte never used in UTF-8
  }
  for (size_t n = 1; n <= continuation_bytes; ++n) {
    if (i + n >= s.size()) return {n, false, true};
    const auto b = static_cast<uint8_t>(s[i + n]);
    if (b < lo || b > hi) return {n, false, false};
    lo = 0x80, hi = 0xBF;
  }
  return {continuation_bytes + 1, true, false};
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // ASCII runs are the common case; skip them quickly.
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Scan scan = ScanUtf8(bytes, i);
    if (!scan.complete) return false;
    i += scan.length;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Scan scan = ScanUtf8(bytes, i);
    if (scan.complete) {
      out.append(bytes.substr(i, scan.length));
    } else {
      out.append(kReplacement);
    }
    i += scan.length;
  }
  return out;
}

size_t IncompleteUtf8Suffix(std::string_view bytes) {
  // A character is at most 4 bytes, so an unfinished one starts within the last 3.
  const size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t start = bytes.size(); start-- > first;) {
    const auto b = static_cast<uint8_t>(bytes[start]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: look further back
    const Utf8Scan scan = ScanUtf8(bytes, start);
    return scan.cut_by_end ? bytes.size() - start : 0;
  }
  return 0;
}

}  // namespace bulkhead::api
