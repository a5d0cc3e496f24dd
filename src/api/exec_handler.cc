#include "api/exec_handler.h"

#include <memory>

#include <boost/asio/this_coro.hpp>

#include "api/exec_output.h"
#include "api/json_output.h"
#include "http/client_hangup_watch.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

std::string Line(const json& event) { return DumpJson(event) + "\n"; }

// The non-streaming form: collect output (capped), answer once the command ended.
asio::awaitable<void> CollectResult(HttpExchange& exchange, core::ExecSession& session,
                                    const ClientHangupWatch& watch, int64_t max_output_bytes) {
  CollectedOutput out(max_output_bytes), err(max_output_bytes);
  for (;;) {
    Result<core::ExecEvent> event = co_await session.Next();
    if (!event.ok()) {
      if (watch.client_gone()) {
        exchange.set_keep_alive(false);
      } else {
        co_await exchange.SendError(event.error());
      }
      co_return;
    }
    switch (event->type) {
      case core::ExecEvent::Type::kStarted:
        break;
      case core::ExecEvent::Type::kStdout:
        out.Append(event->data);
        break;
      case core::ExecEvent::Type::kStderr:
        err.Append(event->data);
        break;
      case core::ExecEvent::Type::kExit: {
        json result = ExitFields(event->exit, out.truncated() || err.truncated());
        out.AddTo(result, "stdout");
        err.AddTo(result, "stderr");
        co_await exchange.SendJson(http::status::ok, result);
        co_return;
      }
    }
  }
}

// The NDJSON form. The first event (start) was read already; it opens the stream.
asio::awaitable<void> StreamEvents(HttpExchange& exchange, core::ExecSession& session,
                                   const ClientHangupWatch& watch, int64_t max_output_bytes,
                                   const core::ExecEvent& start) {
  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-ndjson")) co_return;
  // (json temporaries stay out of co_await expressions: g++ 12 miscompiles those)
  const std::string start_line = Line(json{{"type", "start"}, {"pid", start.pid}});
  if (!co_await exchange.WriteChunk(start_line)) co_return;
  OutputEventEncoder out("stdout", max_output_bytes), err("stderr", max_output_bytes);
  for (;;) {
    // Backpressure: the next event is read only after the previous line was written.
    Result<core::ExecEvent> event = co_await session.Next();
    if (!event.ok()) {
      if (watch.client_gone()) {
        exchange.set_keep_alive(false);
        co_return;
      }
      const json line = {{"type", "error"}, {"code", ErrorCodeOf(event.error())}, {"message", event.error().message}};
      if (co_await exchange.WriteChunk(Line(line))) co_await exchange.EndChunked();
      co_return;
    }
    std::optional<json> line;
    switch (event->type) {
      case core::ExecEvent::Type::kStarted:
        break;
      case core::ExecEvent::Type::kStdout:
        line = out.Push(event->data);
        break;
      case core::ExecEvent::Type::kStderr:
        line = err.Push(event->data);
        break;
      case core::ExecEvent::Type::kExit: {
        std::string tail;
        if (auto rest = out.Flush()) tail += Line(*rest);
        if (auto rest = err.Flush()) tail += Line(*rest);
        json exit = ExitFields(event->exit, out.truncated() || err.truncated());
        exit["type"] = "exit";
        tail += Line(exit);
        if (co_await exchange.WriteChunk(tail)) co_await exchange.EndChunked();
        co_return;
      }
    }
    if (line && !co_await exchange.WriteChunk(Line(*line))) co_return;  // the session's destructor cancels
  }
}

}  // namespace

bool WantsNdjson(std::string_view accept) {
  static constexpr std::string_view kNdjson = "application/x-ndjson";
  for (size_t i = 0; i + kNdjson.size() <= accept.size(); ++i) {
    bool match = true;
    for (size_t j = 0; j < kNdjson.size() && match; ++j) match = (accept[i + j] | 0x20) == kNdjson[j];
    if (match) return true;
  }
  return false;
}

asio::awaitable<void> ServeExec(HttpExchange& exchange, core::SandboxManager& manager,
                                const std::string& sandbox_id, ExecOptions options, bool stream) {
  // The session must live on this connection's strand: its events are awaited here.
  auto executor = co_await asio::this_coro::executor;
  Result<std::unique_ptr<core::ExecSession>> started =
      co_await manager.StartExec(executor, sandbox_id, std::move(options.request));
  if (!started.ok()) {
    co_await exchange.SendError(started.error());
    co_return;
  }
  std::unique_ptr<core::ExecSession> session = std::move(started.value());
  ClientHangupWatch watch(exchange.stream().socket(), [&session] { session->Cancel(); });

  // Until init reports the start, a failure (no such cwd or user) is an ordinary error.
  Result<core::ExecEvent> first = co_await session->Next();
  if (!first.ok()) {
    if (watch.client_gone()) {
      exchange.set_keep_alive(false);
    } else {
      co_await exchange.SendError(first.error());
    }
    co_return;
  }
  if (stream) {
    co_await StreamEvents(exchange, *session, watch, options.max_output_bytes, *first);
  } else {
    co_await CollectResult(exchange, *session, watch, options.max_output_bytes);
  }
}

}  // namespace bulkhead::api
