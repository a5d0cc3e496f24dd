#include "service/init_process.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "common/ctl_protocol.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// Stdin frames well below ctl::kMaxFrame, as exec sends them.
constexpr size_t kStdinFrameBytes = ctl::kMaxFrame / 2;

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A message init sent, decoded; a malformed one is a protocol error of the sandbox's init.
template <typename T>
Result<T> FromInit(Result<T> decoded) {
  if (!decoded.ok()) return core::InitProtocolError(decoded.error().message);
  return decoded;
}

// The kExec of a background process with these options in the sandbox `init` reaches; with
// `attach` the connection then follows it.
ctl::ExecMessage BackgroundExec(const ProcessOptions& options, const core::InitConnection& init, bool attach) {
  ctl::ExecMessage m = core::InitExecPayload(options.request, init.spec, init.proxy_host);
  m.background = true;
  m.attach = attach;
  m.tag = options.tag;
  if (options.timeout_ms) m.timeout_ms = *options.timeout_ms;
  if (options.pty) m.pty = ctl::PtySize{static_cast<uint16_t>(options.pty->cols), static_cast<uint16_t>(options.pty->rows)};
  return m;
}

}  // namespace

Error ProcessNotFound(std::string_view segment) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no process \"{}\" in this sandbox", segment.substr(0, 200)),
                   "process_not_found");
}

Error ProcessExited(const json& process) {
  const json pid = process.is_object() ? process.value("pid", json(nullptr)) : json(nullptr);
  return MakeError(ErrorCode::kConflict, fmt::format("process {} has exited", pid.dump()), "process_exited");
}

bool HasExited(const json& process) { return StringField(process, "state") == "exited"; }


asio::awaitable<Result<json>> StartProcess(core::SandboxManager& manager, asio::any_io_executor executor,
                                           const std::string& sandbox_id, const ProcessOptions& options) {
  Result<core::InitConnection> init = co_await manager.ConnectInit(executor, sandbox_id);
  if (!init.ok()) co_return init.error();
  const std::string request = ctl::Encode(BackgroundExec(options, *init, /*attach=*/false));
  if (Status sent = co_await init->client->Send(ctl::kExec, request); !sent.ok()) co_return sent.error();
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await init->client->Receive();
    if (!frame.ok()) co_return frame.error();
    if (frame->type == ctl::kError) co_return core::ErrorFromInit(frame->payload);
    if (frame->type != ctl::kStarted) continue;  // nothing else is expected; skip what is unknown
    Result<ctl::StartedMessage> started = FromInit(ctl::DecodeStarted(frame->payload));
    if (!started.ok()) co_return started.error();
    if (!started->process) co_return core::InitProtocolError("kStarted without the process");
    co_return ctl::ToJson(*started->process);
  }
}

asio::awaitable<Result<json>> ListProcesses(core::SandboxManager& manager, asio::any_io_executor executor,
                                            const std::string& sandbox_id) {
  Result<core::InitConnection> init = co_await manager.ConnectInit(executor, sandbox_id);
  if (!init.ok()) co_return init.error();
  if (Status sent = co_await init->client->Send(ctl::kProcList, {}); !sent.ok()) co_return sent.error();
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await init->client->Receive();
    if (!frame.ok()) co_return frame.error();
    if (frame->type == ctl::kError) co_return core::ErrorFromInit(frame->payload);
    if (frame->type != ctl::kResult) continue;
    Result<ctl::ProcessList> list = FromInit(ctl::DecodeProcessList(frame->payload));
    if (!list.ok()) co_return list.error();
    json processes = json::array();
    for (const ctl::ProcessInfo& process : list->processes) processes.push_back(ctl::ToJson(process));
    co_return processes;
  }
}

const json* SelectProcess(const json& processes, const ProcessRef& ref) {
  if (!processes.is_array()) return nullptr;
  const json* best = nullptr;
  for (const json& process : processes) {
    if (!process.is_object()) continue;
    if (ref.pid > 0) {
      auto pid = process.find("pid");
      if (pid != process.end() && pid->is_number_integer() && pid->get<int64_t>() == ref.pid) return &process;
      continue;
    }
    if (StringField(process, "tag") != ref.tag) continue;
    if (!HasExited(process)) return &process;  // tags are unique among running processes
    // Among exited ones the last started; times are RFC 3339 of one format, so they sort as text.
    if (best == nullptr || StringField(process, "started_at") >= StringField(*best, "started_at")) best = &process;
  }
  return best;
}

asio::awaitable<Result<json>> FindProcess(core::SandboxManager& manager, asio::any_io_executor executor,
                                          const std::string& sandbox_id, std::string_view segment) {
  Result<json> processes = co_await ListProcesses(manager, executor, sandbox_id);
  if (!processes.ok()) co_return processes.error();
  std::optional<ProcessRef> ref = ParseProcessRef(segment);
  const json* process = ref ? SelectProcess(*processes, *ref) : nullptr;
  if (process == nullptr) co_return ProcessNotFound(segment);
  co_return *process;
}

namespace {

// The attachment that init's kAttached `payload` describes, on `client`.
Result<ProcessAttachment> AttachmentFrom(std::unique_ptr<core::CtlClient> client, std::string_view payload) {
  Result<ctl::AttachedMessage> attached = FromInit(ctl::DecodeAttached(payload));
  if (!attached.ok()) return attached.error();
  ProcessAttachment result;
  result.client = std::move(client);
  result.process = ctl::ToJson(attached->process);
  result.stdout_start = attached->start.stdout_offset;
  result.stderr_start = attached->start.stderr_offset;
  return result;
}

}  // namespace

asio::awaitable<Result<ProcessAttachment>> AttachProcess(core::SandboxManager& manager,
                                                         asio::any_io_executor executor,
                                                         const std::string& sandbox_id, std::string_view segment,
                                                         AttachRequest request) {
  std::optional<ProcessRef> ref = ParseProcessRef(segment);
  int pid = ref ? ref->pid : 0;
  if (!ref || pid == 0) {
    // A tag (or nothing valid): the table says which pid it names. This also answers an
    // unknown sandbox with its own 404 before process_not_found.
    Result<json> process = co_await FindProcess(manager, executor, sandbox_id, segment);
    if (!process.ok()) co_return process.error();
    pid = *core::InitPid(*process);  // ListProcesses checked it
  }
  Result<core::InitConnection> init = co_await manager.ConnectInit(executor, sandbox_id);
  if (!init.ok()) co_return init.error();
  const json attach = {{"pid", pid},
                       {"output", request.output},
                       {"follow", request.follow},
                       {"hold", request.hold},
                       {"stdout_offset", request.stdout_offset},
                       {"stderr_offset", request.stderr_offset}};
  const std::string payload = attach.dump();
  if (Status sent = co_await init->client->Send(ctl::kProcAttach, payload); !sent.ok()) co_return sent.error();
  Result<core::CtlClient::Frame> frame = co_await init->client->Receive();
  if (!frame.ok()) co_return frame.error();
  if (frame->type == ctl::kError) {
    Error error = core::ErrorFromInit(frame->payload);
    if (error.code == ErrorCode::kNotFound) co_return ProcessNotFound(segment);
    co_return error;
  }
  if (frame->type != ctl::kAttached) co_return core::InitProtocolError("expected kAttached");
  co_return AttachmentFrom(std::move(init->client), frame->payload);
}

asio::awaitable<Result<ProcessAttachment>> StartAttachedProcess(core::SandboxManager& manager,
                                                                asio::any_io_executor executor,
                                                                const std::string& sandbox_id,
                                                                const ProcessOptions& options) {
  Result<core::InitConnection> init = co_await manager.ConnectInit(executor, sandbox_id);
  if (!init.ok()) co_return init.error();
  const std::string request = ctl::Encode(BackgroundExec(options, *init, /*attach=*/true));
  if (Status sent = co_await init->client->Send(ctl::kExec, request); !sent.ok()) co_return sent.error();
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await init->client->Receive();
    if (!frame.ok()) co_return frame.error();
    if (frame->type == ctl::kError) co_return core::ErrorFromInit(frame->payload);
    if (frame->type != ctl::kAttached) continue;  // kStarted comes first; kAttached says the rest
    co_return AttachmentFrom(std::move(init->client), frame->payload);
  }
}

asio::awaitable<Status> SendStdin(core::CtlClient& client, std::string_view data) {
  for (size_t at = 0; at < data.size(); at += kStdinFrameBytes) {
    Status sent = co_await client.Send(ctl::kStdin, data.substr(at, kStdinFrameBytes));
    if (!sent.ok()) co_return sent;
  }
  co_return Status{};
}

asio::awaitable<Status> AwaitBarrier(core::CtlClient& client) {
  if (Status sent = co_await client.Send(ctl::kPing, {}); !sent.ok()) co_return sent;
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await client.Receive();
    if (!frame.ok()) co_return frame.error();
    if (frame->type == ctl::kPong) co_return Status{};
    if (frame->type == ctl::kError) co_return core::ErrorFromInit(frame->payload);
    // Anything else (an attach without output sends nothing more) is skipped.
  }
}

}  // namespace bulkhead::api
