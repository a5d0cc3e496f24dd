#include "service/file_output.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

namespace asio = boost::asio;

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

Result<std::optional<uint64_t>> ParseReadSize(const std::string& line) {
  const nlohmann::json parsed = ParseBoundedJson(line);
  if (!parsed.is_object()) return FileWorkerBroken("did not announce the file's size");
  const auto size = parsed.find("size");
  if (size == parsed.end()) return std::optional<uint64_t>();
  if (!size->is_number_unsigned()) return FileWorkerBroken("did not announce the file's size");
  return std::optional<uint64_t>(size->get<uint64_t>());
}

asio::awaitable<void> SendReadBody(HttpExchange& exchange, core::FileOperation& operation, std::string first,
                                   std::optional<uint64_t> size) {
  if (!size) {
    if (!co_await exchange.BeginChunked(http::status::ok, "application/octet-stream")) co_return;
    std::string piece = std::move(first);
    for (;;) {
      if (!piece.empty() && !co_await exchange.WriteChunk(piece)) co_return;
      Result<std::string> next = co_await operation.Read();
      if (!next.ok()) {
        exchange.set_keep_alive(false);  // without the last chunk the client sees it incomplete
        co_return;
      }
      if (next->empty()) break;
      piece = std::move(next.value());
    }
    co_await exchange.EndChunked();
    co_return;
  }
  if (!co_await exchange.BeginFixedLength(http::status::ok, "application/octet-stream", *size)) co_return;
  uint64_t sent = 0;
  std::string piece = std::move(first);
  for (;;) {
    if (piece.size() > *size - sent) {
      // More than announced (the file grew): the response cannot carry it.
      exchange.set_keep_alive(false);
      co_return;
    }
    if (!co_await exchange.WriteBodyPart(piece)) co_return;
    sent += piece.size();
    Result<std::string> next = co_await operation.Read();
    if (!next.ok() || next->empty()) {
      // A failure (or a file that shrank) after the header: only a short body can say so.
      if (!next.ok() || sent != *size) exchange.set_keep_alive(false);
      co_return;
    }
    piece = std::move(next.value());
  }
}

}  // namespace bulkhead::api
