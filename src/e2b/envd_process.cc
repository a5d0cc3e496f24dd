// envd's process service (e2b-protocol.md §5.1, §6.2, §6.3) on bulkhead's background
// processes: Start registers one in init's process table (so it outlives the HTTP stream,
// keeps its in-sandbox pid and tag) and follows its output; Connect follows a running one;
// the unary calls drive one over an attach connection (service/init_process.h).
#include <map>
#include <mutex>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "common/bounded_json.h"
#include "common/ctl_protocol.h"
#include "common/scope_guard.h"
#include "e2b/connect_rpc.h"
#include "e2b/envd.h"
#include "e2b/envd_fs.h"
#include "e2b/process_events.h"
#include "http/client_hangup_watch.h"
#include "service/init_process.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

// StreamInput's body is a stream of small messages; its total is not limited beyond this.
constexpr uint64_t kMaxStreamInputBody = uint64_t(1) << 40;

// The ProcessConfig of the processes this front started, for List: init keeps argv but not
// the request's envs and cwd. Keyed by sandbox and pid, checked against the start time (pids
// are reused); bounded, oldest dropped first (the entries are small).
class ConfigRegistry {
 public:
  void Remember(const std::string& sandbox_id, const json& process, json config) {
    std::lock_guard lock(mutex_);
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());
    entries_[{sandbox_id, process.value("pid", 0)}] = {process.value("started_at", ""), std::move(config)};
  }
  // The remembered config, else one from init's argv.
  json ConfigOf(const std::string& sandbox_id, const json& process) {
    {
      std::lock_guard lock(mutex_);
      auto found = entries_.find({sandbox_id, process.value("pid", 0)});
      if (found != entries_.end() && found->second.started_at == process.value("started_at", "")) {
        return found->second.config;
      }
    }
    json config = {{"cmd", ""}, {"args", json::array()}, {"envs", json::object()}};
    const json cmd = process.value("cmd", json::array());
    for (size_t i = 0; i < cmd.size(); ++i) {
      if (!cmd[i].is_string()) continue;
      if (i == 0) config["cmd"] = cmd[i];
      else config["args"].push_back(cmd[i]);
    }
    return config;
  }
  // Forgets the sandbox's entries for pids no longer running.
  void Prune(const std::string& sandbox_id, const std::vector<int>& running) {
    std::lock_guard lock(mutex_);
    for (auto it = entries_.lower_bound({sandbox_id, 0}); it != entries_.end() && it->first.first == sandbox_id;) {
      if (std::find(running.begin(), running.end(), it->first.second) == running.end()) it = entries_.erase(it);
      else ++it;
    }
  }

 private:
  static constexpr size_t kMaxEntries = 16384;
  struct Entry {
    std::string started_at;
    json config;
  };
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, Entry> entries_;
};

ConfigRegistry& Registry() {
  static ConfigRegistry registry;
  return registry;
}

int PidOf(const json& process) { return core::InitPid(process).value_or(0); }

bool HasPty(const json& process) {
  auto pty = process.find("pty");
  return pty != process.end() && pty->is_object();
}

// An attach connection to the running process `selector` names; not_found as envd says it
// for an unknown or exited one.
asio::awaitable<Result<api::ProcessAttachment>> AttachRunning(EnvdRequest& request, const ProcessSelector& selector,
                                                              api::AttachRequest how) {
  auto executor = co_await asio::this_coro::executor;
  const std::string segment = selector.pid > 0 ? std::to_string(selector.pid) : selector.tag;
  // A tag bulkhead could not hold (all digits, too long) names nothing.
  if (selector.pid == 0 && !api::IsValidTag(selector.tag)) co_return ProcessNotFoundError(selector);
  Result<api::ProcessAttachment> attached =
      co_await api::AttachProcess(request.context.manager, executor, request.sandbox_id, segment, how);
  if (!attached.ok()) {
    if (attached.error().detail_code == "process_not_found") co_return ProcessNotFoundError(selector);
    co_return attached.error();
  }
  if (api::HasExited(attached->process)) co_return ProcessNotFoundError(selector);
  co_return attached;
}

// How a followed stream's Connect-Timeout-Ms ends it, with deadline_exceeded either way.
struct StreamDeadline {
  // Connect's: the stream ends then, the process goes on.
  std::optional<std::chrono::milliseconds> stream;
  // Start's: the deadline is the process's lifetime (init kills it then), and its death by
  // that deadline ends the stream instead of an end event, as envd's request context does.
  bool process = false;
};

// Follows the attached process's output to the stream: data events as init sends them (the
// next frame is read once the client took the last: backpressure), then the end event and
// the end of the stream. A client that goes away ends the attach, never the process.
asio::awaitable<void> FollowOutput(EnvdRequest& request, ServerStream& stream, core::CtlClient& init, bool pty,
                                   StreamDeadline deadline) {
  api::HttpExchange& exchange = request.exchange;
  api::ClientHangupWatch watch(exchange.stream().socket(), [&init] { init.Close(); });
  // The deadline's handler may already be queued when this returns: `following` says
  // whether `init` is still there.
  struct Deadline {
    bool following = true;
    bool passed = false;
  };
  auto state = std::make_shared<Deadline>();
  ScopeGuard stop_following([state] { state->following = false; });
  asio::steady_timer timer(exchange.stream().get_executor());
  if (deadline.stream) {
    timer.expires_after(*deadline.stream);
    timer.async_wait([state, &init](const boost::system::error_code& ec) {
      if (ec || !state->following) return;
      state->passed = true;
      init.Close();
    });
  }
  const std::string_view out_stream = pty ? "pty" : "stdout";
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await init.Receive();
    if (!frame.ok()) {
      if (watch.client_gone() || stream.finished()) co_return co_await stream.Cut();
      if (state->passed) {
        co_await stream.Finish(DeadlineExceeded());
      } else if (frame.error().detail_code == "sandbox_unreachable") {
        // The sandbox died under the stream: cut it, as E2B's proxy does when envd goes. The
        // SDKs then ask /health, which answers 502 for a sandbox that is gone.
        co_await stream.Cut();
      } else {
        co_await stream.Finish(ToRpcError(frame.error()));
      }
      co_return;
    }
    bool sent = true;
    switch (frame->type) {
      case ctl::kStdout:
      case ctl::kStderr: {
        const json data = DataEvent(frame->type == ctl::kStdout ? out_stream : "stderr", frame->payload);
        sent = co_await stream.Send(data);
        break;
      }
      case ctl::kExit: {
        const ctl::ExitMessage exit = ctl::ReadExit(frame->payload);
        if (deadline.process && exit.timed_out) co_return co_await stream.Finish(DeadlineExceeded());
        if (co_await stream.Send(EndEvent(exit))) co_await stream.Finish();
        co_return;
      }
      case ctl::kError: {
        const Error error = core::ErrorFromInit(frame->payload);
        co_await stream.Finish(ToRpcError(error));
        co_return;
      }
      default: break;  // kGap: the byte stream has no way to say it; output goes on
    }
    if (!sent) co_return co_await stream.Cut();
  }
}

void StartKeepalive(EnvdRequest& request, ServerStream& stream) {
  if (std::optional<std::chrono::seconds> interval = KeepaliveInterval(request.exchange.request())) {
    stream.StartKeepalive(*interval, KeepaliveEvent());
  }
}

asio::awaitable<void> Start(EnvdRequest& request) {
  ServerStream stream(request.exchange);
  std::optional<json> message = co_await stream.ReadRequest();
  if (!message) co_return;
  // The audit's detail: the command and its arguments (not its environment, which may hold secrets).
  if (auto process = message->find("process"); process != message->end() && process->is_object())
    request.exchange.Note("cmd", json{{"cmd", process->value("cmd", json())}, {"args", process->value("args", json())}});
  Result<std::optional<std::chrono::milliseconds>> timeout = ConnectTimeout(request.exchange.request());
  if (!timeout.ok()) co_return co_await stream.Finish(ToRpcError(timeout.error()));
  // Whom it runs as and where home is, from the sandbox's own /etc/passwd, as for files.
  Result<SandboxFiles> account = co_await SandboxFiles::Open(request.context.manager, request.sandbox_id, request.user);
  if (!account.ok()) co_return co_await stream.Finish(FileRpcError(account.error()));
  const std::string user = account->user();
  // A sandbox whose template or image set a working directory starts commands there, whoever
  // runs them, as E2B's envd does from a template's last WORKDIR. Its user's home (E2B's base,
  // a template without WORKDIR) or bulkhead's own default is no such choice: the home of
  // whoever runs it applies.
  std::string default_cwd;
  const std::vector<core::SandboxInfo> found = request.context.manager.List(core::ListFilter{.id = request.sandbox_id});
  if (!found.empty()) {
    const core::SandboxSpec& sandbox = found.front().spec;
    const std::string own_home = sandbox.user == "root" ? "/root" : "/home/" + sandbox.user;
    if (sandbox.workdir != core::SandboxSpec().workdir && sandbox.workdir != own_home) default_cwd = sandbox.workdir;
  }
  Result<StartSpec> spec = ParseStartRequest(*message, user, account->home(), default_cwd);
  if (!spec.ok()) co_return co_await stream.Finish(ToRpcError(spec.error()));
  // The deadline is the process's lifetime: init kills it then, whoever still listens.
  if (*timeout && (*timeout)->count() > 0) spec->options.timeout_ms = static_cast<uint64_t>((*timeout)->count());

  auto executor = co_await asio::this_coro::executor;
  // Started and followed on one connection, held: no output is missed, however fast it comes.
  Result<api::ProcessAttachment> attached =
      co_await api::StartAttachedProcess(request.context.manager, executor, request.sandbox_id, spec->options);
  if (!attached.ok()) co_return co_await stream.Finish(StartError(attached.error(), spec->cwd, user));
  const int pid = PidOf(attached->process);
  json config = {{"cmd", spec->cmd}, {"args", spec->args}, {"envs", spec->envs}};
  if (!spec->cwd.empty()) config["cwd"] = spec->cwd;
  Registry().Remember(request.sandbox_id, attached->process, std::move(config));
  core::CtlClient& init = *attached->client;
  // stdin:false: the process reads end-of-file (init keeps a background process's stdin a
  // pipe; closing it at once is envd's /dev/null as the process sees it).
  // (A process that already ended may have closed the connection: what it sent is read next.)
  if (!spec->stdin && !spec->options.pty) {
    Status closed = co_await init.Send(ctl::kStdinClose, {});
    (void)closed;
  }
  const json started = StartEvent(pid);
  const bool sent = co_await stream.Send(started);
  if (!sent) co_return request.exchange.set_keep_alive(false);
  StartKeepalive(request, stream);
  co_await FollowOutput(request, stream, init, spec->options.pty.has_value(),
                        StreamDeadline{.process = spec->options.timeout_ms.has_value()});
}

asio::awaitable<void> Connect(EnvdRequest& request) {
  ServerStream stream(request.exchange);
  std::optional<json> message = co_await stream.ReadRequest();
  if (!message) co_return;
  Result<std::optional<std::chrono::milliseconds>> timeout = ConnectTimeout(request.exchange.request());
  if (!timeout.ok()) co_return co_await stream.Finish(ToRpcError(timeout.error()));
  Result<ProcessSelector> selector = ParseSelector(*message);
  if (!selector.ok()) co_return co_await stream.Finish(ToRpcError(selector.error()));
  api::AttachRequest how;
  how.output = true;
  how.follow = true;
  how.hold = true;
  // Offsets beyond the end: only the output that comes from now on (envd does not replay).
  how.stdout_offset = std::numeric_limits<uint64_t>::max();
  how.stderr_offset = std::numeric_limits<uint64_t>::max();
  Result<api::ProcessAttachment> attached = co_await AttachRunning(request, *selector, how);
  if (!attached.ok()) co_return co_await stream.Finish(ToRpcError(attached.error()));
  const json started = StartEvent(PidOf(attached->process));
  const bool sent = co_await stream.Send(started);
  if (!sent) co_return request.exchange.set_keep_alive(false);
  StartKeepalive(request, stream);
  StreamDeadline deadline;
  if (*timeout && (*timeout)->count() > 0) deadline.stream = **timeout;
  co_await FollowOutput(request, stream, *attached->client, HasPty(attached->process), deadline);
}

asio::awaitable<void> List(EnvdRequest& request) {
  std::optional<json> message = co_await ReadUnaryRequest(request.exchange);
  if (!message) co_return;
  auto executor = co_await asio::this_coro::executor;
  Result<json> processes = co_await api::ListProcesses(request.context.manager, executor, request.sandbox_id);
  if (!processes.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(processes.error()));
  json listed = json::array();
  std::vector<int> running;
  for (const json& process : *processes) {
    if (!process.is_object() || api::HasExited(process)) continue;
    const int pid = PidOf(process);
    running.push_back(pid);
    json info = {{"config", Registry().ConfigOf(request.sandbox_id, process)}, {"pid", pid}};
    if (auto tag = process.find("tag"); tag != process.end() && tag->is_string()) info["tag"] = *tag;
    listed.push_back(std::move(info));
  }
  Registry().Prune(request.sandbox_id, running);
  const json answer = {{"processes", std::move(listed)}};
  co_await SendUnaryResponse(request.exchange, answer);
}

// The unary calls that drive one process: `act` sends its frames on the attach connection;
// a barrier then makes sure init applied them before the answer.
using Action = std::function<asio::awaitable<Status>(core::CtlClient& init)>;

asio::awaitable<void> Drive(EnvdRequest& request, const ProcessSelector& selector,
                            const std::function<std::optional<Error>(const json& process)>& check, const Action& act) {
  Result<api::ProcessAttachment> attached = co_await AttachRunning(request, selector, api::AttachRequest{});
  if (!attached.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(attached.error()));
  if (std::optional<Error> refused = check(attached->process)) {
    co_return co_await SendUnaryError(request.exchange, ToRpcError(*refused));
  }
  core::CtlClient& init = *attached->client;
  // Stdin may wait on a process that does not read: a client that gives up ends the wait.
  api::ClientHangupWatch watch(request.exchange.stream().socket(), [&init] { init.Close(); });
  Status done = co_await act(init);
  if (done.ok()) done = co_await api::AwaitBarrier(init);
  if (!done.ok()) {
    if (watch.client_gone()) co_return request.exchange.set_keep_alive(false);
    co_return co_await SendUnaryError(request.exchange, ToRpcError(done.error()));
  }
  const json empty = json::object();
  co_await SendUnaryResponse(request.exchange, empty);
}

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message)); }

// stdin bytes for a pty process, or pty bytes for a pipe one: refused as envd does.
std::optional<Error> InputMismatch(const json& process, const ProcessInput& input) {
  const bool pty = HasPty(process);
  if (pty && !input.pty) return Invalid(fmt::format("process {} has a pty: send pty input, not stdin", PidOf(process)));
  if (!pty && input.pty) return Invalid(fmt::format("process {} has no pty: send stdin, not pty input", PidOf(process)));
  return std::nullopt;
}

asio::awaitable<void> SendInput(EnvdRequest& request) {
  std::optional<json> message = co_await ReadUnaryRequest(request.exchange);
  if (!message) co_return;
  Result<ProcessSelector> selector = ParseSelector(*message);
  if (!selector.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(selector.error()));
  auto field = message->find("input");
  Result<ProcessInput> input = ParseProcessInput(field == message->end() ? json(nullptr) : *field);
  if (!input.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(input.error()));
  co_await Drive(
      request, *selector, [&](const json& process) { return InputMismatch(process, *input); },
      [&](core::CtlClient& init) { return api::SendStdin(init, input->bytes); });
}

asio::awaitable<void> SendSignal(EnvdRequest& request) {
  std::optional<json> message = co_await ReadUnaryRequest(request.exchange);
  if (!message) co_return;
  Result<ProcessSelector> selector = ParseSelector(*message);
  if (!selector.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(selector.error()));
  auto field = message->find("signal");
  Result<int> signal = ParseE2bSignal(field == message->end() ? json(nullptr) : *field);
  if (!signal.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(signal.error()));
  const std::string payload = json{{"signal", *signal}}.dump();
  co_await Drive(
      request, *selector, [](const json&) { return std::optional<Error>(); },
      [&](core::CtlClient& init) { return init.Send(ctl::kSignal, payload); });
}

asio::awaitable<void> CloseStdin(EnvdRequest& request) {
  std::optional<json> message = co_await ReadUnaryRequest(request.exchange);
  if (!message) co_return;
  Result<ProcessSelector> selector = ParseSelector(*message);
  if (!selector.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(selector.error()));
  co_await Drive(
      request, *selector,
      [](const json& process) -> std::optional<Error> {
        if (HasPty(process)) return Invalid(fmt::format("process {} has a pty: its stdin cannot be closed", PidOf(process)));
        return std::nullopt;
      },
      [](core::CtlClient& init) { return init.Send(ctl::kStdinClose, {}); });
}

asio::awaitable<void> Update(EnvdRequest& request) {
  std::optional<json> message = co_await ReadUnaryRequest(request.exchange);
  if (!message) co_return;
  Result<ProcessSelector> selector = ParseSelector(*message);
  if (!selector.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(selector.error()));
  std::optional<api::PtySize> size;
  if (auto pty = message->find("pty"); pty != message->end() && !pty->is_null()) {
    Result<api::PtySize> parsed = ParsePty(*pty);
    if (!parsed.ok()) co_return co_await SendUnaryError(request.exchange, ToRpcError(parsed.error()));
    size = *parsed;
  }
  co_await Drive(
      request, *selector,
      [](const json& process) -> std::optional<Error> {
        if (!HasPty(process)) return Invalid(fmt::format("process {} has no pty to resize", PidOf(process)));
        return std::nullopt;
      },
      [&](core::CtlClient& init) -> asio::awaitable<Status> {
        if (!size) co_return Status{};
        const std::string payload = json{{"cols", size->cols}, {"rows", size->rows}}.dump();
        co_return co_await init.Send(ctl::kResize, payload);
      });
}

// StreamInput: a client stream of envelopes {start:{process}}, then {data:{input}} and
// {keepalive:{}}, each applied as it arrives; the answer is one {} message.
class InputStreamReader {
 public:
  explicit InputStreamReader(EnvdRequest& request) : request_(request) {}

  // One piece of the body: the complete envelopes in it are applied.
  asio::awaitable<Status> Take(std::string_view piece) {
    pending_.append(piece);
    size_t at = 0;
    Status status;
    while (status.ok() && pending_.size() - at >= 5) {
      const auto flags = static_cast<uint8_t>(pending_[at]);
      uint32_t size = 0;
      for (size_t i = 1; i <= 4; ++i) size = (size << 8) | static_cast<uint8_t>(pending_[at + i]);
      if (flags & kEnvelopeCompressed) {
        status = Invalid("compressed envelopes are not accepted (send identity)");
        break;
      }
      if (size > kMaxRequestMessage) {
        status = MakeError(ErrorCode::kTooLarge, fmt::format("a message is over {} bytes", kMaxRequestMessage));
        break;
      }
      if (pending_.size() - at - 5 < size) break;  // the rest is still to come
      const std::string_view payload = std::string_view(pending_).substr(at + 5, size);
      at += 5 + size;
      if (flags & kEnvelopeEndStream) continue;
      status = co_await Apply(payload);
    }
    pending_.erase(0, at);
    co_return status;
  }

  // After the body: the input reached the process.
  asio::awaitable<Status> Finish() {
    if (!pending_.empty()) co_return Invalid("the request ends inside an envelope");
    if (!attached_) co_return Status{};
    co_return co_await api::AwaitBarrier(*attached_->client);
  }

  core::CtlClient* init() { return attached_ ? attached_->client.get() : nullptr; }

 private:
  asio::awaitable<Status> Apply(std::string_view payload) {
    json message = ParseBoundedJson(payload);
    if (!message.is_object()) co_return Invalid("a StreamInput message is not a JSON object");
    if (auto start = message.find("start"); start != message.end() && !start->is_null()) {
      if (attached_) co_return Invalid("StreamInput got a second start");
      Result<ProcessSelector> selector = ParseSelector(*start);
      if (!selector.ok()) co_return selector.error();
      Result<api::ProcessAttachment> attached = co_await AttachRunning(request_, *selector, api::AttachRequest{});
      if (!attached.ok()) co_return attached.error();
      attached_ = std::move(*attached);
      co_return Status{};
    }
    if (auto data = message.find("data"); data != message.end() && !data->is_null()) {
      if (!attached_) co_return Invalid("StreamInput must begin with start (the process)");
      if (!data->is_object()) co_return Invalid("data must be an object {\"input\"}");
      auto input_field = data->find("input");
      Result<ProcessInput> input = ParseProcessInput(input_field == data->end() ? json(nullptr) : *input_field);
      if (!input.ok()) co_return input.error();
      if (std::optional<Error> refused = InputMismatch(attached_->process, *input)) co_return *refused;
      co_return co_await api::SendStdin(*attached_->client, input->bytes);
    }
    if (message.contains("keepalive")) co_return Status{};
    co_return Invalid("a StreamInput message must be start, data or keepalive");
  }

  EnvdRequest& request_;
  std::string pending_;
  std::optional<api::ProcessAttachment> attached_;
};

asio::awaitable<void> StreamInput(EnvdRequest& request) {
  ServerStream stream(request.exchange);
  InputStreamReader reader(request);
  Result<uint64_t> read = co_await request.exchange.ReadBodyStreamed(
      kMaxStreamInputBody, [&reader](std::string_view piece) { return reader.Take(piece); },
      /*hand_on_arrivals=*/true);
  if (!read.ok()) co_return co_await stream.Finish(ToRpcError(read.error()));
  Status done = co_await reader.Finish();
  if (!done.ok()) co_return co_await stream.Finish(ToRpcError(done.error()));
  const json empty = json::object();
  if (co_await stream.Send(empty)) co_await stream.Finish();
}

}  // namespace

asio::awaitable<void> ServeProcessService(EnvdRequest& request, std::string_view method) {
  if (method == "Start") co_return co_await Start(request);
  if (method == "Connect") co_return co_await Connect(request);
  if (method == "List") co_return co_await List(request);
  if (method == "SendInput") co_return co_await SendInput(request);
  if (method == "StreamInput") co_return co_await StreamInput(request);
  if (method == "SendSignal") co_return co_await SendSignal(request);
  if (method == "CloseStdin") co_return co_await CloseStdin(request);
  if (method == "Update") co_return co_await Update(request);
  const RpcError error{"unimplemented", fmt::format("process.Process/{} is not a method", method.substr(0, 64))};
  co_await SendUnaryError(request.exchange, error);
}

}  // namespace bulkhead::e2b
