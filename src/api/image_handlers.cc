#include "api/image_handlers.h"

#include "api/handlers.h"
#include "api/json_output.h"
#include "http/json_text.h"
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/this_coro.hpp>

#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "http/client_hangup_watch.h"
#include "service/build_context.h"
#include "service/image_build.h"
#include "service/image_transfer.h"
#include "storage/fs_util.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

// Answers a transfer: its result once done (`status`), or with `stream` its progress as NDJSON
// ending with {"status": "done", done_key: result} or {"status": "error", "error": {...}}.
// A client gone from the stream (its write failed) is told to `on_gone`.
asio::awaitable<void> ServeTransfer(HttpExchange& exchange, asio::thread_pool& pool, const Transfer& transfer,
                                    bool stream, http::status status, const char* done_key,
                                    const std::function<void()>* on_gone = nullptr) {
  if (!stream) {
    const LineWriter ignore = [](const std::string&) -> asio::awaitable<bool> { co_return false; };
    Result<json> answer = co_await RunTransfer(pool, transfer, ignore);
    if (!answer.ok()) co_return co_await exchange.SendError(answer.error());
    co_return co_await exchange.SendJson(status, *answer);
  }
  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-ndjson")) co_return;
  const LineWriter write = [&exchange, on_gone](const std::string& chunk) -> asio::awaitable<bool> {
    const bool written = co_await exchange.WriteChunk(chunk);
    if (!written && on_gone) (*on_gone)();
    co_return written;
  };
  Result<json> answer = co_await RunTransfer(pool, transfer, write);
  const json last = answer.ok() ? json{{"status", "done"}, {done_key, *answer}}
                                : json{{"status", "error"}, {"error", ErrorToJson(answer.error())["error"]}};
  const std::string line = DumpJson(last) + "\n";
  if (co_await exchange.WriteChunk(line)) co_await exchange.EndChunked();
}

}  // namespace

asio::awaitable<void> ServePull(HttpExchange& exchange, core::SandboxManager& manager, asio::thread_pool& pool,
                                const TenantOfBody& tenant_of, bool stream) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<storage::PullRequest> request = ParsePullRequest(*body, manager.config().registry.default_registry);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  const auto named = body->find("tenant");
  Result<std::string> tenant = tenant_of(named == body->end() ? nullptr : &*named);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  request->tenant = *tenant;
  const Transfer pull = [&manager, request = *request](const storage::PullListener& listener) -> Result<json> {
    auto image = manager.PullImage(request, listener);
    if (!image.ok()) return image.error();
    return ImageToJson(*image);
  };
  co_await ServeTransfer(exchange, pool, pull, stream, http::status::created, "image");
}

asio::awaitable<void> ServePush(HttpExchange& exchange, core::SandboxManager& manager, asio::thread_pool& pool,
                                const TenantOfBody& tenant_of, bool stream) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<storage::PushRequest> request = ParsePushRequest(*body, manager.config().registry.default_registry);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  const auto named = body->find("tenant");
  Result<std::string> tenant = tenant_of(named == body->end() ? nullptr : &*named);
  if (!tenant.ok()) co_return co_await exchange.SendError(tenant.error());
  request->tenant = *tenant;
  const Transfer push = [&manager, request = *request](const storage::PullListener& listener) -> Result<json> {
    auto pushed = manager.PushImage(request, listener);
    if (!pushed.ok()) return pushed.error();
    return json{{"reference", pushed->reference}, {"digest", pushed->digest}};
  };
  co_await ServeTransfer(exchange, pool, push, stream, http::status::ok, "pushed");
}

asio::awaitable<void> ServeBuild(HttpExchange& exchange, core::SandboxManager& manager, asio::thread_pool& pool,
                                 const std::string& upload_dir, const QueryParams& query, const std::string& tenant,
                                 bool stream) {
  // (Errors are made before they are sent: g++ 12 destroys temporaries in a co_await wrongly.)
  BuildRequest request;
  Result<std::string> dockerfile = ParseBuildQuery(query, request);
  if (!dockerfile.ok()) co_return co_await exchange.SendError(dockerfile.error());
  request.tenant = tenant;
  // The build's own directory (root's alone): the spooled context, its tree, the tars of steps.
  std::string dir = upload_dir + "/build-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    const Error failed = SystemError("mkdtemp " + dir, errno);
    co_return co_await exchange.SendError(failed);
  }
  ScopeGuard remove_dir([&dir] { (void)storage::RemoveTree(dir); });
  const std::string tar = dir + "/context.tar";
  {
    UniqueFd fd(::open(tar.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) {
      const Error failed = SystemError("create " + tar, errno);
      co_return co_await exchange.SendError(failed);
    }
    Result<uint64_t> received = co_await exchange.ReadBodyToFile(fd.get(), kMaxImageUpload);
    if (!received.ok()) co_return co_await exchange.SendError(received.error());
    if (*received == 0) {
      const Error empty =
          MakeError(ErrorCode::kBadRequest, "the body must be the build context: a tar archive, optionally compressed");
      co_return co_await exchange.SendError(empty);
    }
  }
  request.context_dir = dir + "/context";
  request.work_dir = dir + "/work";
  const auto io = co_await asio::this_coro::executor;
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  remove_dir.Dismiss();  // the transfer removes it, on the pool, whatever happens
  const Transfer build = [&manager, request, dir, tar, dockerfile = *dockerfile, io, cancelled](
                             const storage::PullListener& listener) mutable -> Result<json> {
    ScopeGuard cleanup([&dir] { (void)storage::RemoveTree(dir); });
    if (::mkdir(request.context_dir.c_str(), 0700) != 0 || ::mkdir(request.work_dir.c_str(), 0700) != 0)
      return SystemError("mkdir " + dir, errno);
    auto text = UnpackContext(tar, request.context_dir, dockerfile);
    ::unlink(tar.c_str());
    if (!text.ok()) return text.error();
    request.dockerfile = std::move(*text);
    auto image = RunBuild(manager, io, request, listener, *cancelled);
    if (!image.ok()) return image.error();
    return ImageToJson(*image);
  };
  // A client that hangs up cancels the build, even while a step prints nothing.
  const std::function<void()> cancel = [cancelled] { *cancelled = true; };
  ClientHangupWatch watch(exchange.stream().socket(), cancel);
  co_await ServeTransfer(exchange, pool, build, stream, http::status::created, "image", &cancel);
}

}  // namespace bulkhead::api
