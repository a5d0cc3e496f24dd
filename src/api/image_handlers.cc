#include "api/image_handlers.h"

#include "api/json_output.h"
#include "http/json_text.h"
#include "service/image_transfer.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

// Answers a transfer: its result once done (`status`), or with `stream` its progress as NDJSON
// ending with {"status": "done", done_key: result} or {"status": "error", "error": {...}}.
asio::awaitable<void> ServeTransfer(HttpExchange& exchange, asio::thread_pool& pool, const Transfer& transfer,
                                    bool stream, http::status status, const char* done_key) {
  if (!stream) {
    const LineWriter ignore = [](const std::string&) -> asio::awaitable<bool> { co_return false; };
    Result<json> answer = co_await RunTransfer(pool, transfer, ignore);
    if (!answer.ok()) co_return co_await exchange.SendError(answer.error());
    co_return co_await exchange.SendJson(status, *answer);
  }
  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-ndjson")) co_return;
  const LineWriter write = [&exchange](const std::string& chunk) -> asio::awaitable<bool> {
    co_return co_await exchange.WriteChunk(chunk);
  };
  Result<json> answer = co_await RunTransfer(pool, transfer, write);
  const json last = answer.ok() ? json{{"status", "done"}, {done_key, *answer}}
                                : json{{"status", "error"}, {"error", ErrorToJson(answer.error())["error"]}};
  const std::string line = DumpJson(last) + "\n";
  if (co_await exchange.WriteChunk(line)) co_await exchange.EndChunked();
}

}  // namespace

asio::awaitable<void> ServePull(HttpExchange& exchange, core::SandboxManager& manager, asio::thread_pool& pool,
                                bool stream) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<storage::PullRequest> request = ParsePullRequest(*body, manager.config().registry.default_registry);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  const Transfer pull = [&manager, request = *request](const storage::PullListener& listener) -> Result<json> {
    auto image = manager.PullImage(request, listener);
    if (!image.ok()) return image.error();
    return ImageToJson(*image);
  };
  co_await ServeTransfer(exchange, pool, pull, stream, http::status::created, "image");
}

asio::awaitable<void> ServePush(HttpExchange& exchange, core::SandboxManager& manager, asio::thread_pool& pool,
                                bool stream) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<storage::PushRequest> request = ParsePushRequest(*body, manager.config().registry.default_registry);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  const Transfer push = [&manager, request = *request](const storage::PullListener& listener) -> Result<json> {
    auto pushed = manager.PushImage(request, listener);
    if (!pushed.ok()) return pushed.error();
    return json{{"reference", pushed->reference}, {"digest", pushed->digest}};
  };
  co_await ServeTransfer(exchange, pool, push, stream, http::status::ok, "pushed");
}

}  // namespace bulkhead::api
