// Text for a model: output and file contents arrive as bytes, tools answer in UTF-8.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace bulkhead::mcp {

// True when `bytes` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string ToValidUtf8(std::string_view bytes);

// The longest prefix of `bytes` of at most `limit` bytes that does not end inside a UTF-8
// character (it may still contain invalid bytes earlier).
size_t Utf8BoundaryAtOrBefore(std::string_view bytes, size_t limit);

// How many bytes at the end of `bytes` are the start of a character cut short (0 to 3):
// what to hold back so that a prefix ends on a character boundary.
size_t IncompleteUtf8Suffix(std::string_view bytes);

// Keeps the first and last bytes of a stream up to a budget, counting what falls between,
// so a command's output is bounded however much it writes.
class HeadTailBuffer {
 public:
  explicit HeadTailBuffer(size_t budget) : head_budget_(budget / 2), tail_budget_(budget - budget / 2) {}

  void Append(std::string_view bytes);

  size_t total_bytes() const { return total_; }
  bool truncated() const { return total_ > head_.size() + tail_.size(); }
  // The kept text (valid UTF-8), with a marker where bytes were left out.
  std::string Render() const;

 private:
  size_t head_budget_;
  size_t tail_budget_;
  std::string head_;
  std::string tail_;  // the last bytes; trimmed from the front when it grows past twice its budget
  size_t total_ = 0;
};

}  // namespace bulkhead::mcp
