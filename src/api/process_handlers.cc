#include "api/process_handlers.h"

#include <optional>

#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "api/json_output.h"
#include "api/process_attach.h"
#include "api/process_output.h"
#include "common/bounded_json.h"
#include "common/ctl_protocol.h"
#include "common/scope_guard.h"
#include "http/client_hangup_watch.h"
#include "service/init_process.h"
#include "service/process_request.h"
#include "service/validate.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

// A start request carries an argv of up to 1 MiB and an env of up to 256 KiB, in JSON.
constexpr uint64_t kMaxStartBody = 2 * 1024 * 1024;

Error TagInUse(const std::string& tag) {
  return MakeError(ErrorCode::kConflict, fmt::format("a running process already has the tag \"{}\"", tag),
                   "tag_in_use");
}

Error NotAPty(const json& process) {
  return MakeError(ErrorCode::kConflict, fmt::format("process {} has no pty", process.value("pid", json()).dump()),
                   "not_a_pty");
}

std::string Lines(const std::vector<json>& events) {
  std::string text;
  for (const json& event : events) text += DumpJson(event) + "\n";
  return text;
}

std::string ErrorLine(const Error& error) {
  const json line = {{"type", "error"}, {"code", ErrorCodeOf(error)}, {"message", error.message}};
  return DumpJson(line) + "\n";
}

}  // namespace

asio::awaitable<void> ProcessHandlers::Handle(HttpExchange& exchange, const RouteMatch& route,
                                              const QueryParams& query) {
  const std::string& id = route.Param("id");
  if (!IsValidSandboxId(id)) co_return co_await exchange.SendError(SandboxNotFound(id));
  const std::string& pid = route.Param("pid");
  switch (route.id) {
    case RouteId::kCreateProcess: co_return co_await Create(exchange, id);
    case RouteId::kListProcesses: co_return co_await List(exchange, id);
    case RouteId::kGetProcess: co_return co_await Get(exchange, id, pid);
    case RouteId::kProcessOutput: co_return co_await Output(exchange, id, pid, query);
    case RouteId::kProcessStdin:
    case RouteId::kProcessStdinClose:
    case RouteId::kProcessSignal:
    case RouteId::kProcessResize: co_return co_await Control(exchange, route.id, id, pid);
    case RouteId::kProcessAttach: co_return co_await ServeProcessAttach(exchange, manager_, id, pid, query);
    default: break;
  }
  co_await exchange.SendError(MakeError(ErrorCode::kInternal, "unhandled process route"));
}

bool ProcessHandlers::ReserveTag(const std::string& sandbox_id, const std::string& tag) {
  std::lock_guard lock(tags_mutex_);
  return starting_tags_.emplace(sandbox_id, tag).second;
}

void ProcessHandlers::ReleaseTag(const std::string& sandbox_id, const std::string& tag) {
  std::lock_guard lock(tags_mutex_);
  starting_tags_.erase({sandbox_id, tag});
}

asio::awaitable<void> ProcessHandlers::Create(HttpExchange& exchange, const std::string& id) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxStartBody);
  if (!body) co_return;
  if (auto cmd = body->find("cmd"); cmd != body->end()) exchange.Note("cmd", *cmd);  // (the audit's)
  Result<ProcessOptions> options = ParseProcessOptions(*body);
  if (!options.ok()) co_return co_await exchange.SendError(options.error());
  auto executor = co_await asio::this_coro::executor;

  std::optional<ScopeGuard> release_tag;
  if (options->tag) {
    const std::string& tag = *options->tag;
    if (!ReserveTag(id, tag)) co_return co_await exchange.SendError(TagInUse(tag));
    release_tag.emplace([this, &id, &tag] { ReleaseTag(id, tag); });
    Result<json> processes = co_await ListProcesses(manager_, executor, id);
    if (!processes.ok()) co_return co_await exchange.SendError(processes.error());
    ProcessRef ref;
    ref.tag = tag;
    const json* same = SelectProcess(*processes, ref);
    if (same != nullptr && !HasExited(*same)) co_return co_await exchange.SendError(TagInUse(tag));
  }
  Result<json> process = co_await StartProcess(manager_, executor, id, *options);
  if (!process.ok()) co_return co_await exchange.SendError(process.error());
  co_await exchange.SendJson(http::status::created, *process);
}

asio::awaitable<void> ProcessHandlers::List(HttpExchange& exchange, const std::string& id) {
  auto executor = co_await asio::this_coro::executor;
  Result<json> processes = co_await ListProcesses(manager_, executor, id);
  if (!processes.ok()) co_return co_await exchange.SendError(processes.error());
  const json body = {{"processes", std::move(*processes)}};
  co_await exchange.SendJson(http::status::ok, body);
}

asio::awaitable<void> ProcessHandlers::Get(HttpExchange& exchange, const std::string& id, const std::string& pid) {
  auto executor = co_await asio::this_coro::executor;
  Result<json> process = co_await FindProcess(manager_, executor, id, pid);
  if (!process.ok()) co_return co_await exchange.SendError(process.error());
  co_await exchange.SendJson(http::status::ok, *process);
}

asio::awaitable<void> ProcessHandlers::Output(HttpExchange& exchange, const std::string& id, const std::string& pid,
                                              const QueryParams& query) {
  Result<OutputQuery> wanted = ParseOutputQuery(query);
  if (!wanted.ok()) co_return co_await exchange.SendError(wanted.error());
  auto executor = co_await asio::this_coro::executor;
  AttachRequest request;
  request.output = true;
  request.follow = wanted->follow;
  request.stdout_offset = wanted->stdout_offset;
  request.stderr_offset = wanted->stderr_offset;
  Result<ProcessAttachment> attached = co_await AttachProcess(manager_, executor, id, pid, request);
  if (!attached.ok()) co_return co_await exchange.SendError(attached.error());
  std::unique_ptr<core::CtlClient> init = std::move(attached->client);
  // A client that goes away while the process is silent ends the attach (never the process).
  ClientHangupWatch watch(exchange.stream().socket(), [&init] { init->Close(); });

  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-ndjson")) co_return;
  ProcessOutputCursor cursor(wanted->stdout_offset, wanted->stderr_offset);
  const std::string first = Lines(cursor.Start(attached->stdout_start, attached->stderr_start));
  if (!co_await exchange.WriteChunk(first)) co_return;
  for (;;) {
    // Backpressure: the next frame is read only after the previous lines were written.
    Result<core::CtlClient::Frame> frame = co_await init->Receive();
    if (!frame.ok()) {
      if (watch.client_gone()) {
        exchange.set_keep_alive(false);
        co_return;
      }
      if (co_await exchange.WriteChunk(ErrorLine(frame.error()))) co_await exchange.EndChunked();
      co_return;
    }
    std::string text;
    bool last = false;
    switch (frame->type) {
      case ctl::kStdout:
        text = Lines(cursor.Output(OutputStream::kStdout, frame->payload));
        break;
      case ctl::kStderr:
        text = Lines(cursor.Output(OutputStream::kStderr, frame->payload));
        break;
      case ctl::kGap: {
        Result<ctl::StreamOffsets> offsets = ctl::DecodeStreamOffsets(frame->payload);
        if (!offsets.ok()) {
          text = ErrorLine(offsets.error());
          last = true;
        } else {
          text = Lines(cursor.Skip(offsets->stdout_offset, offsets->stderr_offset));
        }
        break;
      }
      case ctl::kEnd:
        text = Lines(cursor.Finish());
        last = true;
        break;
      case ctl::kExit:
        text = Lines(cursor.Finish()) + DumpJson(ProcessExitEvent(ctl::ReadExit(frame->payload))) + "\n";
        last = true;
        break;
      case ctl::kError:
        text = ErrorLine(core::ErrorFromInit(frame->payload));
        last = true;
        break;
      default:
        continue;  // a frame this daemon does not know: skip it
    }
    if (!co_await exchange.WriteChunk(text)) co_return;
    if (last) {
      co_await exchange.EndChunked();
      co_return;
    }
  }
}

asio::awaitable<void> ProcessHandlers::Control(HttpExchange& exchange, RouteId route, const std::string& id,
                                               const std::string& pid) {
  std::string stdin_data;
  int signal = 0;
  PtySize size;
  if (route != RouteId::kProcessStdinClose) {
    std::optional<json> body =
        co_await exchange.ReadJsonObject(route == RouteId::kProcessStdin ? kMaxExecBody : kMaxJsonBody);
    if (!body) co_return;
    Status parsed;
    if (route == RouteId::kProcessStdin) {
      Result<std::string> data = ParseStdinBody(*body);
      if (data.ok()) stdin_data = std::move(*data);
      else parsed = data.error();
    } else if (route == RouteId::kProcessSignal) {
      Result<int> number = ParseSignalBody(*body);
      if (number.ok()) signal = *number;
      else parsed = number.error();
    } else {
      Result<PtySize> wanted = ParseResize(*body);
      if (wanted.ok()) size = *wanted;
      else parsed = wanted.error();
    }
    if (!parsed.ok()) co_return co_await exchange.SendError(parsed.error());
  }

  auto executor = co_await asio::this_coro::executor;
  Result<ProcessAttachment> attached = co_await AttachProcess(manager_, executor, id, pid, AttachRequest{});
  if (!attached.ok()) co_return co_await exchange.SendError(attached.error());
  if (HasExited(attached->process)) co_return co_await exchange.SendError(ProcessExited(attached->process));
  const auto pty = attached->process.find("pty");
  const bool has_pty = pty != attached->process.end() && pty->is_object();
  if (route == RouteId::kProcessResize && !has_pty) {
    co_return co_await exchange.SendError(NotAPty(attached->process));
  }

  core::CtlClient& init = *attached->client;
  // Stdin may wait on a process that does not read: a client that gives up ends the wait.
  ClientHangupWatch watch(exchange.stream().socket(), [&init] { init.Close(); });
  Status sent;
  if (route == RouteId::kProcessStdin) {
    sent = co_await SendStdin(init, stdin_data);
  } else if (route == RouteId::kProcessStdinClose) {
    sent = co_await init.Send(ctl::kStdinClose, {});
  } else if (route == RouteId::kProcessSignal) {
    const std::string payload = json{{"signal", signal}}.dump();
    sent = co_await init.Send(ctl::kSignal, payload);
  } else {
    const std::string payload = json{{"cols", size.cols}, {"rows", size.rows}}.dump();
    sent = co_await init.Send(ctl::kResize, payload);
  }
  if (sent.ok()) sent = co_await AwaitBarrier(init);
  if (!sent.ok()) {
    if (watch.client_gone()) {
      exchange.set_keep_alive(false);
      co_return;
    }
    co_return co_await exchange.SendError(sent.error());
  }
  co_await exchange.SendNoContent();
}

}  // namespace bulkhead::api
