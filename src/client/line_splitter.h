// Splits a byte stream that arrives in arbitrary pieces into lines (NDJSON framing).
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bulkhead::cli {

// Receives one line without its "\n" (or "\r\n"); an error stops the stream.
using LineHandler = std::function<Status(std::string_view line)>;

class LineSplitter {
 public:
  // A line longer than this is an error rather than unbounded memory.
  explicit LineSplitter(size_t max_line_bytes = 64 << 20) : max_line_bytes_(max_line_bytes) {}

  // Hands every line completed by `data` to `on_line`; empty lines are skipped.
  Status Feed(std::string_view data, const LineHandler& on_line);

  // The stream ended: a last line without "\n" is handed over too.
  Status Finish(const LineHandler& on_line);

 private:
  Status Deliver(std::string_view line, const LineHandler& on_line);

  size_t max_line_bytes_;
  std::string pending_;  // the start of a line whose "\n" has not arrived yet
};

}  // namespace bulkhead::cli
