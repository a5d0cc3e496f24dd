#include "api/file_output.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

Error FileWorkerBroken(std::string_view what) {
  return MakeError(ErrorCode::kInternal, fmt::format("the sandbox's file worker {}", what));
}

Result<std::string> JsonAnswer(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (!text.starts_with('{') || !nlohmann::json::accept(text)) return FileWorkerBroken("answered malformed JSON");
  text += '\n';
  return text;
}

boost::asio::awaitable<Result<std::pair<std::string, std::string>>> ReadFirstLine(core::FileOperation& operation) {
  std::string head;
  size_t newline;
  while ((newline = head.find('\n')) == std::string::npos) {
    if (head.size() > kMaxFirstLineBytes) co_return FileWorkerBroken("sent an overlong first line");
    Result<std::string> piece = co_await operation.Read();
    if (!piece.ok()) co_return piece.error();
    if (piece->empty()) co_return FileWorkerBroken("ended without its first line");
    head += *piece;
  }
  std::string rest = head.substr(newline + 1);
  head.resize(newline);
  co_return std::pair{std::move(head), std::move(rest)};
}

}  // namespace bulkhead::api
