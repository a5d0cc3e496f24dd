#include "api/file_handler.h"

#include <optional>

#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "api/json_output.h"
#include "common/bounded_json.h"
#include "core/file_operation.h"
#include "http/client_hangup_watch.h"
#include "service/file_output.h"
#include "service/file_request.h"
#include "service/validate.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

// The JSON answer of an operation (one Entry, a summary) is small; a listing is at most
// ctl::kMaxListEntries entries.
constexpr size_t kMaxAnswerBytes = 1024 * 1024;
constexpr size_t kMaxListingBytes = 64 * 1024 * 1024;
// A watch event line names one path; more than this without a newline is a broken worker.
constexpr size_t kMaxEventLineBytes = 64 * 1024;

FileOp OpOfRoute(RouteId route) {
  switch (route) {
    case RouteId::kReadFile: return FileOp::kRead;
    case RouteId::kWriteFile: return FileOp::kWrite;
    case RouteId::kDeleteFile: return FileOp::kRemove;
    case RouteId::kListFiles: return FileOp::kList;
    case RouteId::kMakeDirectory: return FileOp::kMkdir;
    case RouteId::kMoveFile: return FileOp::kMove;
    case RouteId::kDownloadArchive: return FileOp::kArchiveCreate;
    case RouteId::kUploadArchive: return FileOp::kArchiveExtract;
    case RouteId::kWatchFiles: return FileOp::kWatch;
    default: return FileOp::kStat;
  }
}

// An error once the operation failed: answered, unless the client is gone already.
asio::awaitable<void> Fail(HttpExchange& exchange, const ClientHangupWatch& watch, const Error& error) {
  if (watch.client_gone()) {
    exchange.set_keep_alive(false);
    co_return;
  }
  co_await exchange.SendError(error);
}

// stat, list, mkdir, move, remove: one JSON object (or nothing, for 204) once the worker ended.
asio::awaitable<void> ServeAnswer(HttpExchange& exchange, core::FileOperation& operation, http::status success,
                                  size_t max_answer) {
  ClientHangupWatch watch(exchange.stream().socket(), [&operation] { operation.Cancel(); });
  Result<std::string> answer = co_await operation.Finish(max_answer);
  if (!answer.ok()) co_return co_await Fail(exchange, watch, answer.error());
  if (success == http::status::no_content) co_return co_await exchange.SendNoContent();
  Result<std::string> body = JsonAnswer(std::move(answer.value()));
  if (!body.ok()) co_return co_await Fail(exchange, watch, body.error());
  co_await exchange.SendText(success, "application/json", std::move(body.value()));
}

// PUT files and PUT files/archive: the body streams into the worker's stdin.
asio::awaitable<void> ServeUpload(HttpExchange& exchange, core::FileOperation& operation, http::status success) {
  bool worker_stopped = false;
  const HttpExchange::BodySink to_worker = [&operation, &worker_stopped](std::string_view piece) -> asio::awaitable<Status> {
    Status sent = co_await operation.Write(piece);
    if (!sent.ok()) worker_stopped = true;
    co_return sent;
  };
  // A worker that ends while the body streams (a read-only path, a full disk) is answered at
  // once, also when its end comes while the daemon waits for more of the body: that wait stops.
  operation.WhenEnded([&exchange, &worker_stopped] {
    worker_stopped = true;
    exchange.set_keep_alive(false);  // (the rest of the body stays unread)
    exchange.stream().cancel();
  });
  Result<uint64_t> received = co_await exchange.ReadBodyStreamed(kMaxFileUpload, to_worker);
  operation.WhenEnded(nullptr);
  if (!received.ok() && !worker_stopped) {
    // The body broke off (the client left, bad chunking, over the limit). Closing the
    // connection kills the worker: it never takes part of a body for all of it.
    operation.Cancel();
    co_return co_await exchange.SendError(received.error());
  }
  // With the body all read, a client that hangs up while the worker finishes cancels it. If
  // the worker stopped early (disk full, a bad archive), the unread rest of the body is left
  // where it is: the answer goes out now and the connection closes after it.
  std::optional<ClientHangupWatch> watch;
  if (received.ok()) {
    (void)co_await operation.CloseInput();  // if it fails, Finish says why
    watch.emplace(exchange.stream().socket(), [&operation] { operation.Cancel(); });
  }
  Result<std::string> answer = co_await operation.Finish(kMaxAnswerBytes);
  if (watch && watch->client_gone()) {
    exchange.set_keep_alive(false);
    co_return;
  }
  if (!answer.ok()) co_return co_await exchange.SendError(answer.error());
  Result<std::string> body = JsonAnswer(std::move(answer.value()));
  if (!body.ok()) co_return co_await exchange.SendError(body.error());
  co_await exchange.SendText(success, "application/json", std::move(body.value()));
}

// GET files: {"size": N} from the worker, then exactly N bytes with Content-Length N; or {}
// and the file to its end, chunked (a size the file's filesystem does not know). Each piece
// is read from the worker only once the previous one was written to the client.
asio::awaitable<void> ServeDownload(HttpExchange& exchange, core::FileOperation& operation) {
  ClientHangupWatch watch(exchange.stream().socket(), [&operation] { operation.Cancel(); });
  Result<std::pair<std::string, std::string>> first = co_await ReadFirstLine(operation);
  if (!first.ok()) co_return co_await Fail(exchange, watch, first.error());
  Result<std::optional<uint64_t>> size = ParseReadSize(first->first);
  if (!size.ok()) co_return co_await Fail(exchange, watch, size.error());
  co_await SendReadBody(exchange, operation, std::move(first->second), *size);
}

// GET files/archive: the worker's tar stream as chunks. The status is sent with the first
// bytes, so a path that does not exist is still an ordinary 404.
asio::awaitable<void> ServeArchive(HttpExchange& exchange, core::FileOperation& operation) {
  ClientHangupWatch watch(exchange.stream().socket(), [&operation] { operation.Cancel(); });
  Result<std::string> piece = co_await operation.Read();
  if (!piece.ok()) co_return co_await Fail(exchange, watch, piece.error());
  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-tar")) co_return;
  while (!piece->empty()) {
    if (!co_await exchange.WriteChunk(*piece)) co_return;
    piece = co_await operation.Read();
    if (!piece.ok()) {
      // Without the last chunk the client sees the archive is incomplete.
      exchange.set_keep_alive(false);
      co_return;
    }
  }
  co_await exchange.EndChunked();
}

// GET files/watch: NDJSON events. The 200 goes out once the worker reported its watches set,
// so whatever the client does after it sees the response is reported.
asio::awaitable<void> ServeWatch(HttpExchange& exchange, core::FileOperation& operation) {
  ClientHangupWatch watch(exchange.stream().socket(), [&operation] { operation.Cancel(); });
  Result<std::pair<std::string, std::string>> first = co_await ReadFirstLine(operation);
  if (!first.ok()) co_return co_await Fail(exchange, watch, first.error());
  const json ready = ParseBoundedJson(first->first);
  if (!ready.is_object() || ready.value("type", json()) != "ready") {
    co_return co_await Fail(exchange, watch, FileWorkerBroken("did not report its watch ready"));
  }
  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-ndjson")) co_return;

  // Whole lines only: a chunk never ends inside an event.
  std::string pending = std::move(first->second);
  for (;;) {
    const size_t end = pending.rfind('\n');
    if (end != std::string::npos) {
      if (!co_await exchange.WriteChunk(std::string_view(pending).substr(0, end + 1))) co_return;
      pending.erase(0, end + 1);
    }
    if (pending.size() > kMaxEventLineBytes) {
      exchange.set_keep_alive(false);
      co_return;
    }
    Result<std::string> piece = co_await operation.Read();
    if (!piece.ok()) {
      if (watch.client_gone()) {
        exchange.set_keep_alive(false);
        co_return;
      }
      const json line = {{"type", "error"}, {"code", ErrorCodeOf(piece.error())}, {"message", piece.error().message}};
      const std::string text = DumpJson(line) + "\n";
      if (co_await exchange.WriteChunk(text)) co_await exchange.EndChunked();
      co_return;
    }
    if (piece->empty()) break;  // the worker ended (the watched path went away)
    pending += *piece;
  }
  co_await exchange.EndChunked();
}

}  // namespace

asio::awaitable<void> ServeFiles(HttpExchange& exchange, core::SandboxManager& manager, RouteId route,
                                 const std::string& sandbox_id, const QueryParams& query) {
  if (!IsValidSandboxId(sandbox_id)) co_return co_await exchange.SendError(SandboxNotFound(sandbox_id));
  const FileOp op = OpOfRoute(route);

  Result<FileRequest> request = MakeError(ErrorCode::kInternal, "unparsed");
  if (op == FileOp::kMkdir || op == FileOp::kMove) {
    std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
    if (!body) co_return;
    request = ParseFileBody(op, *body, query);
  } else {
    request = ParseFileQuery(op, query);
  }
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  if ((op == FileOp::kArchiveCreate || op == FileOp::kWatch) && exchange.request().version() < 11) {
    co_return co_await exchange.SendError(
        MakeError(ErrorCode::kBadRequest, "this response streams (chunked): it needs HTTP/1.1"));
  }

  // Everything the operation does happens on this connection's strand.
  auto executor = co_await asio::this_coro::executor;
  Result<core::InitConnection> connection = co_await manager.ConnectInit(executor, sandbox_id);
  if (!connection.ok()) co_return co_await exchange.SendError(connection.error());
  Result<json> file_op = FileOpJson(*request, connection->spec.workdir);
  if (!file_op.ok()) co_return co_await exchange.SendError(file_op.error());
  const std::string user = request->user.value_or(connection->spec.user);
  const bool with_input = op == FileOp::kWrite || op == FileOp::kArchiveExtract;
  Result<std::unique_ptr<core::FileOperation>> started =
      co_await core::FileOperation::Start(std::move(connection.value()), *file_op, user, with_input);
  if (!started.ok()) co_return co_await exchange.SendError(started.error());
  core::FileOperation& operation = **started;

  switch (op) {
    case FileOp::kRead: co_return co_await ServeDownload(exchange, operation);
    case FileOp::kWrite: co_return co_await ServeUpload(exchange, operation, http::status::created);
    case FileOp::kArchiveExtract: co_return co_await ServeUpload(exchange, operation, http::status::ok);
    case FileOp::kArchiveCreate: co_return co_await ServeArchive(exchange, operation);
    case FileOp::kWatch: co_return co_await ServeWatch(exchange, operation);
    case FileOp::kList: co_return co_await ServeAnswer(exchange, operation, http::status::ok, kMaxListingBytes);
    case FileOp::kMkdir: co_return co_await ServeAnswer(exchange, operation, http::status::created, kMaxAnswerBytes);
    case FileOp::kRemove: co_return co_await ServeAnswer(exchange, operation, http::status::no_content, kMaxAnswerBytes);
    case FileOp::kStat:
    case FileOp::kMove: co_return co_await ServeAnswer(exchange, operation, http::status::ok, kMaxAnswerBytes);
  }
}

}  // namespace bulkhead::api
