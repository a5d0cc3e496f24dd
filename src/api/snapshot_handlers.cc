// The snapshot and fork routes of ApiHandlers (handlers.h).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "api/handlers.h"
#include "api/json_output.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "http/blocking.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

}  // namespace

asio::awaitable<void> ApiHandlers::CreateSnapshot(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<SnapshotRequest> request = ParseSnapshotRequest(*body);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::SnapshotInfo> snapshot = co_await RunBlocking(
      context_.blocking_pool, [&] { return manager.CreateSnapshot(id, request->name, request->memory); });
  if (!snapshot.ok()) co_return co_await exchange.SendError(snapshot.error());
  co_await exchange.SendJson(http::status::created, SnapshotToJson(*snapshot));
}

asio::awaitable<void> ApiHandlers::ForkSandbox(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<ForkRequest> request = ParseForkRequest(*body);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  core::SandboxManager& manager = context_.manager;
  Result<std::vector<core::SandboxInfo>> forks = co_await RunBlocking(
      context_.blocking_pool, [&] { return manager.Fork(id, request->count, request->memory); });
  if (!forks.ok()) co_return co_await exchange.SendError(forks.error());
  json sandboxes = json::array();
  for (const core::SandboxInfo& sandbox : *forks) sandboxes.push_back(SandboxToJson(sandbox));
  const json response = {{"sandboxes", std::move(sandboxes)}};
  co_await exchange.SendJson(http::status::created, response);
}

asio::awaitable<void> ApiHandlers::ListSnapshots(HttpExchange& exchange, const Caller& caller) {
  json snapshots = json::array();
  for (const core::SnapshotInfo& snapshot : context_.manager.ListSnapshots()) {
    if (!caller.HostAdmin() && snapshot.tenant != caller.tenant) continue;
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

asio::awaitable<void> ApiHandlers::ExportSnapshot(HttpExchange& exchange, const std::string& id) {
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SnapshotNotFound(id));
  // Written whole to a spool file first: a failure then is a clean error response, and the
  // length is known (a client sees a cut-short download as one).
  std::string spool_path = context_.upload_dir + "/export-XXXXXX";
  UniqueFd spool(mkostemp(spool_path.data(), O_CLOEXEC));
  if (!spool) co_return co_await exchange.SendError(SystemError("create export file", errno));
  ScopeGuard remove_spool([&spool_path] { unlink(spool_path.c_str()); });
  core::SandboxManager& manager = context_.manager;
  const int spool_fd = spool.get();
  Status exported = co_await RunBlocking(context_.blocking_pool, [&] { return manager.ExportSnapshot(id, spool_fd); });
  if (!exported.ok()) co_return co_await exchange.SendError(exported.error());
  struct stat st {};
  if (::fstat(spool_fd, &st) != 0) co_return co_await exchange.SendError(SystemError("stat export file", errno));
  exchange.SetResponseHeader(http::field::content_disposition, "attachment; filename=\"" + id + ".tar.zst\"");
  if (!co_await exchange.BeginFixedLength(http::status::ok, "application/zstd", static_cast<uint64_t>(st.st_size))) {
    co_return;
  }
  std::vector<char> piece(1 << 20);
  for (off_t offset = 0; offset < st.st_size;) {
    const ssize_t n = ::pread(spool_fd, piece.data(), piece.size(), offset);
    if (n <= 0) {
      exchange.set_keep_alive(false);  // cut short of its Content-Length: the client sees it failed
      co_return;
    }
    const bool sent = co_await exchange.WriteBodyPart(std::string_view(piece.data(), static_cast<size_t>(n)));
    if (!sent) co_return;
    offset += n;
  }
}

asio::awaitable<void> ApiHandlers::ImportSnapshot(HttpExchange& exchange, const QueryParams& query) {
  bool memory = true;  // ?memory=false takes a memory snapshot's files alone
  if (Status ok = ReadBoolParam(query, "memory", memory); !ok.ok()) co_return co_await exchange.SendError(ok.error());
  std::string spool_path = context_.upload_dir + "/import-XXXXXX";
  UniqueFd spool(mkostemp(spool_path.data(), O_CLOEXEC));
  if (!spool) co_return co_await exchange.SendError(SystemError("create import file", errno));
  ScopeGuard remove_spool([&spool_path] { unlink(spool_path.c_str()); });
  Result<uint64_t> received = co_await exchange.ReadBodyToFile(spool.get(), kMaxImageUpload);
  if (!received.ok()) co_return co_await exchange.SendError(received.error());
  if (*received == 0) {
    co_return co_await exchange.SendError(
        MakeError(ErrorCode::kInvalid, "the body must be a snapshot archive (.tar.zst from GET .../export)"));
  }
  if (::lseek(spool.get(), 0, SEEK_SET) != 0) co_return co_await exchange.SendError(SystemError("rewind", errno));
  core::SandboxManager& manager = context_.manager;
  const int spool_fd = spool.get();
  Result<core::SnapshotInfo> snapshot = co_await RunBlocking(context_.blocking_pool, [&] {
    return manager.ImportSnapshot(spool_fd, static_cast<int64_t>(kMaxImageUpload) * 4, memory);
  });
  if (!snapshot.ok()) co_return co_await exchange.SendError(snapshot.error());
  co_await exchange.SendJson(http::status::created, SnapshotToJson(*snapshot));
}

}  // namespace bulkhead::api
