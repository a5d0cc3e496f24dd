#include "mcp/text.h"

#include <algorithm>

namespace bulkhead::mcp {
namespace {

// The length of the valid UTF-8 character at the start of `bytes`, or 0 if it is invalid
// or incomplete.
size_t CharLength(std::string_view bytes) {
  const auto byte = [&bytes](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char first = byte(0);
  if (first < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (first >= 0xC2 && first <= 0xDF) {
    length = 2;
  } else if (first >= 0xE0 && first <= 0xEF) {
    length = 3;
    if (first == 0xE0) low = 0xA0;   // no overlong forms
    if (first == 0xED) high = 0x9F;  // no surrogates
  } else if (first >= 0xF0 && first <= 0xF4) {
    length = 4;
    if (first == 0xF0) low = 0x90;
    if (first == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (bytes.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t length = CharLength(bytes);
    if (length == 0) return false;
    bytes.remove_prefix(length);
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  while (!bytes.empty()) {
    const size_t length = CharLength(bytes);
    if (length == 0) {
      text += "\xEF\xBF\xBD";  // U+FFFD
      bytes.remove_prefix(1);
    } else {
      text.append(bytes.substr(0, length));
      bytes.remove_prefix(length);
    }
  }
  return text;
}

size_t Utf8BoundaryAtOrBefore(std::string_view bytes, size_t limit) {
  if (limit >= bytes.size()) return bytes.size();
  size_t cut = limit;
  // Step back over continuation bytes (at most 3) to the start of the character at `cut`.
  for (int steps = 0; steps < 3 && cut > 0 && (static_cast<unsigned char>(bytes[cut]) & 0xC0) == 0x80; ++steps) {
    --cut;
  }
  return (static_cast<unsigned char>(bytes[cut]) & 0xC0) == 0x80 ? limit : cut;
}

size_t IncompleteUtf8Suffix(std::string_view bytes) {
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const unsigned char byte = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t wanted = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return wanted > back ? back : 0;
  }
  return 0;
}

void HeadTailBuffer::Append(std::string_view bytes) {
  total_ += bytes.size();
  const size_t to_head = std::min(bytes.size(), head_budget_ - head_.size());
  head_.append(bytes.substr(0, to_head));
  bytes.remove_prefix(to_head);
  if (bytes.empty() || tail_budget_ == 0) return;
  tail_.append(bytes);
  if (tail_.size() > 2 * tail_budget_) tail_.erase(0, tail_.size() - tail_budget_);
}

std::string HeadTailBuffer::Render() const {
  std::string_view tail = tail_;
  if (tail.size() > tail_budget_) tail.remove_prefix(tail.size() - tail_budget_);
  const size_t omitted = total_ - head_.size() - tail.size();
  if (omitted == 0) return ToValidUtf8(head_ + std::string(tail));
  // Cut at character boundaries so the marker does not split a character.
  const size_t head_end = head_.size() - IncompleteUtf8Suffix(head_);
  size_t tail_start = 0;
  while (tail_start < tail.size() && tail_start < 3 &&
         (static_cast<unsigned char>(tail[tail_start]) & 0xC0) == 0x80) {
    ++tail_start;
  }
  return ToValidUtf8(head_.substr(0, head_end)) + "\n[... " + std::to_string(omitted) +
         " bytes omitted ...]\n" + ToValidUtf8(tail.substr(tail_start));
}

}  // namespace bulkhead::mcp
