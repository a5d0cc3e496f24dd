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

// Reads an offset field of init's JSON: a non-negative integer.
std::optional<uint64_t> OffsetField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;  // signed or unsigned
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) return std::nullopt;
  return it->get<uint64_t>();
}

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A Process from init with each field of the type ctl_protocol.h gives it, and only those
// fields (what reaches a client is what the API documents); else nullopt.
std::optional<json> ProcessFromInit(const json& process) {
  const std::optional<int> pid = core::InitPid(process);
  if (!pid) return std::nullopt;
  json out = {{"pid", *pid}};
  auto take = [&](const char* key, auto valid) {
    auto it = process.find(key);
    if (it == process.end() || !valid(*it)) return false;
    out[key] = *it;
    return true;
  };
  auto text_or_null = [](const json& v) { return v.is_string() || v.is_null(); };
  auto number_or_null = [](const json& v) { return v.is_number_integer() || v.is_null(); };
  auto text = [](const json& v) { return v.is_string(); };
  auto argv = [](const json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& arg) { return arg.is_string(); });
  };
  auto state = [](const json& v) { return v == "running" || v == "exited"; };
  auto offset = [](const json& v) { return v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0); };
  auto side = [](const json& pty, const char* key) {
    auto it = pty.find(key);
    return it != pty.end() && it->is_number_integer() && it->get<int64_t>() >= 1 && it->get<int64_t>() <= 65535;
  };
  auto pty = [&](const json& v) { return v.is_null() || (v.is_object() && side(v, "cols") && side(v, "rows")); };
  if (!take("tag", text_or_null) || !take("cmd", argv) || !take("state", state) || !take("exit_code", number_or_null) ||
      !take("signal", number_or_null) || !take("started_at", text) || !take("exited_at", text_or_null) ||
      !take("pty", pty)) {
    return std::nullopt;
  }
  for (const char* key : {"stdout_offset", "stderr_offset", "stdout_start", "stderr_start"}) {
    if (!take(key, offset)) return std::nullopt;
  }
  if (out["pty"].is_object()) out["pty"] = {{"cols", out["pty"]["cols"]}, {"rows", out["pty"]["rows"]}};
  return out;
}

// The Process under `key` of init's `payload` (a `frame`).
Result<json> ProcessIn(const json& payload, const char* key, std::string_view frame) {
  auto process = payload.find(key);
  std::optional<json> checked = process != payload.end() ? ProcessFromInit(*process) : std::nullopt;
  if (!checked) return core::InitProtocolError(fmt::format("{} without a valid process", frame));
  return std::move(*checked);
}

// The kExec of a background process with these options in a sandbox with `spec`; with
// `attach` the connection then follows it.
ctl::ExecMessage BackgroundExec(const ProcessOptions& options, const core::SandboxSpec& spec, bool attach) {
  ctl::ExecMessage m = core::InitExecPayload(options.request, spec);
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

Result<StreamOffsets> ParseStreamOffsets(const json& payload) {
  std::optional<uint64_t> out = OffsetField(payload, "stdout_offset");
  std::optional<uint64_t> err = OffsetField(payload, "stderr_offset");
  if (!out || !err) return core::InitProtocolError("missing stream offsets");
  return StreamOffsets{*out, *err};
}

asio::awaitable<Result<json>> StartProcess(core::SandboxManager& manager, asio::any_io_executor executor,
                                           const std::string& sandbox_id, const ProcessOptions& options) {
  Result<core::InitConnection> init = co_await manager.ConnectInit(executor, sandbox_id);
  if (!init.ok()) co_return init.error();
  const std::string request = ctl::Encode(BackgroundExec(options, init->spec, /*attach=*/false));
  if (Status sent = co_await init->client->Send(ctl::kExec, request); !sent.ok()) co_return sent.error();
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await init->client->Receive();
    if (!frame.ok()) co_return frame.error();
    if (frame->type == ctl::kError) co_return core::ErrorFromInit(frame->payload);
    if (frame->type != ctl::kStarted) continue;  // nothing else is expected; skip what is unknown
    Result<json> started = core::ParseInitObject(frame->payload, "kStarted");
    if (!started.ok()) co_return started.error();
    co_return ProcessIn(*started, "process", "kStarted");
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
    Result<json> result = core::ParseInitObject(frame->payload, "kResult");
    if (!result.ok()) co_return result.error();
    auto processes = result->find("processes");
    if (processes == result->end() || !processes->is_array()) {
      co_return core::InitProtocolError("kResult without processes");
    }
    json checked = json::array();
    for (const json& process : *processes) {
      std::optional<json> valid = ProcessFromInit(process);
      if (!valid) co_return core::InitProtocolError("kResult with an invalid process");
      checked.push_back(std::move(*valid));
    }
    co_return checked;
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
  Result<json> attached = core::ParseInitObject(payload, "kAttached");
  if (!attached.ok()) return attached.error();
  Result<StreamOffsets> start = ParseStreamOffsets(*attached);
  if (!start.ok()) return start.error();
  Result<json> process = ProcessIn(*attached, "process", "kAttached");
  if (!process.ok()) return process.error();
  ProcessAttachment result;
  result.client = std::move(client);
  result.process = std::move(*process);
  result.stdout_start = start->stdout_offset;
  result.stderr_start = start->stderr_offset;
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
  const std::string request = ctl::Encode(BackgroundExec(options, init->spec, /*attach=*/true));
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
