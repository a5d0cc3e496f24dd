#include "client/line_splitter.h"

namespace bulkhead::cli {

Status LineSplitter::Deliver(std::string_view line, const LineHandler& on_line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return {};
  return on_line(line);
}

Status LineSplitter::Feed(std::string_view data, const LineHandler& on_line) {
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      if (pending_.size() + data.size() > max_line_bytes_) {
        return MakeError(ErrorCode::kTooLarge, "a streamed line is longer than " +
                                                   std::to_string(max_line_bytes_) + " bytes",
                         "line_too_long");
      }
      pending_.append(data);
      return {};
    }
    std::string_view piece = data.substr(0, newline);
    data.remove_prefix(newline + 1);
    if (pending_.empty()) {
      BH_TRY(Deliver(piece, on_line));  // the common case: no copy
    } else {
      pending_.append(piece);
      std::string line = std::move(pending_);
      pending_.clear();
      BH_TRY(Deliver(line, on_line));
    }
  }
  return {};
}

Status LineSplitter::Finish(const LineHandler& on_line) {
  std::string line = std::move(pending_);
  pending_.clear();
  return Deliver(line, on_line);
}

}  // namespace bulkhead::cli
