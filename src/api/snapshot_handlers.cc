// The snapshot and fork routes of ApiHandlers (handlers.h).
#include <utility>

#include <fmt/format.h>

#include "api/blocking.h"
#include "api/handlers.h"
#include "api/json_output.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

Error SandboxNotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no sandbox with id \"{}\"", id), "sandbox_not_found");
}

Error SnapshotNotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no snapshot with id \"{}\"", id), "snapshot_not_found");
}

}  // namespace

asio::awaitable<void> ApiHandlers::CreateSnapshot(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<std::string> name = ParseSnapshotRequest(*body);
  if (!name.ok()) co_return co_await exchange.SendError(name.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::SnapshotInfo> snapshot =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.CreateSnapshot(id, *name); });
  if (!snapshot.ok()) co_return co_await exchange.SendError(snapshot.error());
  co_await exchange.SendJson(http::status::created, SnapshotToJson(*snapshot));
}

asio::awaitable<void> ApiHandlers::ForkSandbox(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<int> count = ParseForkRequest(*body);
  if (!count.ok()) co_return co_await exchange.SendError(count.error());
  core::SandboxManager& manager = context_.manager;
  Result<std::vector<core::SandboxInfo>> forks =
      co_await RunBlocking(context_.blocking_pool, [&] { return manager.Fork(id, *count); });
  if (!forks.ok()) co_return co_await exchange.SendError(forks.error());
  json sandboxes = json::array();
  for (const core::SandboxInfo& sandbox : *forks) sandboxes.push_back(SandboxToJson(sandbox));
  const json response = {{"sandboxes", std::move(sandboxes)}};
  co_await exchange.SendJson(http::status::created, response);
}

asio::awaitable<void> ApiHandlers::ListSnapshots(HttpExchange& exchange) {
  json snapshots = json::array();
  for (const core::SnapshotInfo& snapshot : context_.manager.ListSnapshots()) {
    snapshots.push_back(SnapshotToJson(snapshot));
  }
  const json response = {{"snapshots", std::move(snapshots)}};
  co_await exchange.SendJson(http::status::ok, response);
}

asio::awaitable<void> ApiHandlers::GetSnapshot(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SnapshotNotFound(id));
  Result<core::SnapshotInfo> snapshot = context_.manager.GetSnapshot(id);
  if (!snapshot.ok()) co_return co_await exchange.SendError(snapshot.error());
  co_await exchange.SendJson(http::status::ok, SnapshotToJson(*snapshot));
}

asio::awaitable<void> ApiHandlers::DeleteSnapshot(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SnapshotNotFound(id));
  core::SandboxManager& manager = context_.manager;
  Status deleted = co_await RunBlocking(context_.blocking_pool, [&] { return manager.DeleteSnapshot(id); });
  if (!deleted.ok()) co_return co_await exchange.SendError(deleted.error());
  co_await exchange.SendNoContent();
}

}  // namespace bulkhead::api
