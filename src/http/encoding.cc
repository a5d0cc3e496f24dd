#include "http/encoding.h"

#include <array>
#include <cstdint>
#include <cstring>

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

// Eight bytes at a time: a 1 in every byte, and every byte's high bit.
constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighBits = 0x8080808080808080ULL;

// Where the run of ASCII bytes starting at i ends.
size_t AsciiRunEnd(std::string_view s, size_t i) {
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    if (word & kHighBits) break;
  }
  while (i < s.size() && static_cast<uint8_t>(s[i]) < 0x80) ++i;
  return i;
}

// Whether all 8 bytes at p are ASCII that JSON takes as is: no control byte, quote or
// backslash (the classic "has a byte less than / equal to" bit tricks, exact for "any").
bool WordNeedsNoEscape(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  const auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHighBits; };
  const uint64_t control = (w - kOnes * 0x20) & ~w & kHighBits;
  return ((w & kHighBits) | control | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\'))) == 0;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // ASCII runs are the common case; skip them quickly.
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      i = AsciiRunEnd(bytes, i);
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

bool AppendJsonString(std::string& out, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t start = out.size();
  out.reserve(out.size() + bytes.size() + 2);
  out.push_back('"');
  size_t i = 0;
  while (i < bytes.size()) {
    // Copy the longest run that needs no escape at once.
    size_t run = i;
    while (run < bytes.size()) {
      if (run + 8 <= bytes.size() && WordNeedsNoEscape(bytes.data() + run)) {
        run += 8;
        continue;
      }
      const auto b = static_cast<uint8_t>(bytes[run]);
      if (b < 0x20 || b == '"' || b == '\\') break;
      if (b < 0x80) {
        ++run;
        continue;
      }
      const Utf8Scan scan = ScanUtf8(bytes, run);
      if (!scan.complete) {
        out.resize(start);
        return false;
      }
      run += scan.length;
    }
    out.append(bytes.data() + i, run - i);
    if (run == bytes.size()) break;
    const auto b = static_cast<uint8_t>(bytes[run]);
    switch (b) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        out += "\\u00";
        out.push_back(kHex[b >> 4]);
        out.push_back(kHex[b & 0xF]);
    }
    i = run + 1;
  }
  out.push_back('"');
  return true;
}

}  // namespace bulkhead::api
