#include "fake_manager.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <spdlog/spdlog.h>

#include "common/ctl_protocol.h"
#include "daemon/server.h"
#include "fuzz_support.h"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::fuzz {
namespace {

namespace asio = boost::asio;
using LocalSocket = asio::local::stream_protocol::socket;

constexpr size_t kMaxEcho = 64 * 1024;

Error SandboxNotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, "no sandbox " + id, "sandbox_not_found");
}

std::string Frame(uint8_t type, std::string_view payload) {
  std::string out(ctl::kHeaderSize, '\0');
  ctl::EncodeHeader(reinterpret_cast<uint8_t*>(out.data()), type, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

// The sandbox side of one exec: started, the command line (and stdin) echoed on stdout,
// a line on stderr, exit 0.
asio::awaitable<void> EchoInit(LocalSocket socket, core::ExecRequest request) {
  std::string echo;
  for (const std::string& arg : request.argv) echo += arg + " ";
  if (request.stdin_data) echo += *request.stdin_data;
  if (echo.size() > kMaxEcho) echo.resize(kMaxEcho);
  std::string frames = Frame(ctl::kStarted, R"({"pid": 42})");
  if (!echo.empty()) frames += Frame(ctl::kStdout, echo);
  frames += Frame(ctl::kStderr, "done\n");
  frames += Frame(ctl::kExit, R"({"exit_code": 0, "signal": null, "timed_out": false, "duration_ms": 1.5})");
  boost::system::error_code ec;
  co_await asio::async_write(socket, asio::buffer(frames), asio::redirect_error(asio::use_awaitable, ec));
}

struct CtlFrame {
  uint8_t type = 0;
  std::string payload;
};

asio::awaitable<std::optional<CtlFrame>> ReadFrame(LocalSocket& socket) {
  uint8_t header[ctl::kHeaderSize];
  boost::system::error_code ec;
  co_await asio::async_read(socket, asio::buffer(header), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  const int64_t length = ctl::DecodePayloadLength(header);
  if (length < 0) co_return std::nullopt;
  CtlFrame frame{header[4], std::string(size_t(length), '\0')};
  co_await asio::async_read(socket, asio::buffer(frame.payload), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  co_return frame;
}

asio::awaitable<bool> Send(LocalSocket& socket, const std::string& frames) {
  boost::system::error_code ec;
  co_await asio::async_write(socket, asio::buffer(frames), asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

nlohmann::json Process(int pid, bool exited) {
  return {{"pid", pid},
          {"tag", exited ? nlohmann::json(nullptr) : nlohmann::json("web")},
          {"cmd", {"python3", "-m", "http.server"}},
          {"state", exited ? "exited" : "running"},
          {"exit_code", exited ? nlohmann::json(0) : nlohmann::json(nullptr)},
          {"signal", nullptr},
          {"started_at", "2024-05-01T10:00:00.000Z"},
          {"exited_at", exited ? nlohmann::json("2024-05-01T10:00:01.000Z") : nlohmann::json(nullptr)},
          {"pty", nullptr},
          {"stdout_offset", 6},
          {"stderr_offset", 0},
          {"stdout_start", 0},
          {"stderr_start", 0}};
}

std::string Entry(const std::string& path) {
  return nlohmann::json{{"path", path}, {"name", path.substr(path.rfind('/') + 1)}, {"type", "file"}, {"size", 6},
                        {"mode", 420}, {"uid", 0}, {"gid", 0}, {"mtime", "2024-05-01T10:00:00.000Z"}}
      .dump();
}

const std::string kExitOk = R"({"exit_code": 0, "signal": null, "timed_out": false, "duration_ms": 0.5})";

// A file operation as the worker answers it: the input (if any) read to its end, then the
// output the operation's protocol describes.
asio::awaitable<void> FileOpWorker(LocalSocket& socket, const nlohmann::json& request) {
  const nlohmann::json op = request.value("file_op", nlohmann::json::object());
  const std::string name = op.value("op", "");
  const std::string path = op.value("path", op.value("to", "/"));
  if (!co_await Send(socket, Frame(ctl::kStarted, R"({"pid": 77})"))) co_return;
  if (request.value("stdin", false)) {
    for (;;) {
      std::optional<CtlFrame> frame = co_await ReadFrame(socket);
      if (!frame) co_return;
      if (frame->type == ctl::kStdinClose) break;
    }
  }
  std::string out;
  if (name == "read") {
    out = "{\"size\": 6}\nhello\n";
  } else if (name == "list") {
    out = R"({"entries": [)" + Entry(path + "/a.txt") + R"(], "truncated": false})" "\n";
  } else if (name == "archive_create") {
    out = std::string(1024, '\0');
  } else if (name == "archive_extract") {
    out = "{\"entries\": 1, \"bytes\": 6}\n";
  } else if (name == "watch") {
    out = "{\"type\": \"ready\"}\n{\"type\": \"create\", \"path\": \"" + path + "/new\", \"dir\": false}\n";
  } else if (name != "remove") {
    out = Entry(path) + "\n";
  }
  std::string frames;
  if (!out.empty()) frames += Frame(ctl::kStdout, out);
  co_await Send(socket, frames + Frame(ctl::kExit, kExitOk));
}

// The sandbox's init for one control connection (ctl_protocol.h): a process table of pid 12
// ("web", running) and pid 13 (exited), file operations that succeed, an attach that echoes
// stdin as output and answers pings.
asio::awaitable<void> ScriptedInit(LocalSocket socket) {
  std::optional<CtlFrame> first = co_await ReadFrame(socket);
  if (!first) co_return;
  nlohmann::json request = nlohmann::json::parse(first->payload, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) request = nlohmann::json::object();  // kPing and kProcList carry none
  switch (first->type) {
    case ctl::kPing: co_await Send(socket, Frame(ctl::kPong, "")); co_return;
    case ctl::kProcList: {
      const nlohmann::json processes = {{"processes", {Process(12, false), Process(13, true)}}};
      co_await Send(socket, Frame(ctl::kResult, processes.dump()));
      co_return;
    }
    case ctl::kExec:
      if (request.contains("file_op")) co_return co_await FileOpWorker(socket, request);
      co_await Send(socket, Frame(ctl::kStarted, nlohmann::json{{"pid", 12}, {"process", Process(12, false)}}.dump()));
      co_return;
    case ctl::kProcAttach: {
      const int pid = request["pid"].is_number_integer() ? request["pid"].get<int>() : 0;
      if (pid != 12 && pid != 13) {
        co_await Send(socket, Frame(ctl::kError, R"({"code": "not_found", "message": "no such process"})"));
        co_return;
      }
      const nlohmann::json attached = {{"process", Process(pid, pid == 13)}, {"stdout_offset", 0}, {"stderr_offset", 0}};
      std::string frames = Frame(ctl::kAttached, attached.dump());
      if (request.value("output", false)) frames += Frame(ctl::kStdout, "hello\n");
      if (pid == 13) {
        co_await Send(socket, frames + Frame(ctl::kExit, kExitOk));
        co_return;
      }
      if (!request.value("follow", false) && request.value("output", false)) {
        co_await Send(socket, frames + Frame(ctl::kEnd, ""));
        co_return;
      }
      if (!co_await Send(socket, frames)) co_return;
      // Driving the process until the daemon hangs up: stdin comes back as output, a ping
      // (the daemon's barrier after stdin, signals, resizes) is answered.
      for (;;) {
        std::optional<CtlFrame> frame = co_await ReadFrame(socket);
        if (!frame) co_return;
        std::string reply;
        if (frame->type == ctl::kStdin && !frame->payload.empty()) reply = Frame(ctl::kStdout, frame->payload);
        if (frame->type == ctl::kPing) reply = Frame(ctl::kPong, "");
        if (!reply.empty() && !co_await Send(socket, reply)) co_return;
      }
    }
    default:
      co_await Send(socket, Frame(ctl::kError, R"({"code": "invalid_argument", "message": "unknown request"})"));
  }
}

core::SandboxInfo Sandbox(const std::string& id, const std::string& state) {
  core::SandboxInfo info;
  info.id = id;
  info.state = state;
  info.created_at = "2024-05-01T10:00:00Z";
  info.expires_at = "2024-05-01T10:05:00Z";
  info.spec.metadata["owner"] = "fuzz";
  info.spec.env["LANG"] = "C.UTF-8";
  return info;
}

core::SnapshotInfo Snapshot() { return {"snap_1", "base", "sb1", "2024-05-01T10:00:00Z", 4096, "host"}; }

}  // namespace

Result<core::SandboxInfo> FakeManager::Known(const std::string& id, const std::string& state) {
  if (id == "sb1") return Sandbox(id, state.empty() ? "running" : state);
  if (id == "sb2") return Sandbox(id, state.empty() ? "paused" : state);
  return SandboxNotFound(id);
}

Result<core::SandboxInfo> FakeManager::Create(const core::SandboxSpec& spec) {
  if (spec.image != "host") return MakeError(ErrorCode::kNotFound, "no image " + spec.image, "image_not_found");
  core::SandboxInfo info = Sandbox("sb-new", "running");
  info.spec = spec;
  return info;
}

Result<core::SandboxInfo> FakeManager::Get(const std::string& id) {
  Result<core::SandboxInfo> info = Known(id);
  if (info.ok()) info->usage = core::SandboxUsage{.cpu_s = 0.25, .memory_bytes = 1 << 20, .disk_bytes = 8192, .pids = 3};
  return info;
}

std::optional<std::string> FakeManager::TenantOf(const std::string& id) {
  if (auto info = Known(id)) return info->spec.tenant;
  return std::nullopt;
}

std::vector<core::SandboxInfo> FakeManager::List(const core::ListFilter& filter) {
  std::vector<core::SandboxInfo> out;
  for (const char* id : {"sb1", "sb2"}) {
    core::SandboxInfo info = *Known(id);
    if (filter.state && *filter.state != info.state) continue;
    bool match = true;
    for (const auto& [key, value] : filter.metadata) {
      auto it = info.spec.metadata.find(key);
      match = match && it != info.spec.metadata.end() && it->second == value;
    }
    if (match) out.push_back(std::move(info));
  }
  return out;
}

Status FakeManager::Delete(const std::string& id) {
  Result<core::SandboxInfo> info = Known(id);
  if (!info.ok()) return info.error();
  return {};
}

Result<core::SandboxInfo> FakeManager::SetTimeout(const std::string& id, int64_t timeout_s) {
  Result<core::SandboxInfo> info = Known(id);
  if (info.ok()) info->spec.timeout_s = timeout_s;
  return info;
}

Result<core::SandboxInfo> FakeManager::Pause(const std::string& id) { return Known(id, "paused"); }
Result<core::SandboxInfo> FakeManager::Resume(const std::string& id) { return Known(id, "running"); }
Result<core::SandboxInfo> FakeManager::Stop(const std::string& id) { return Known(id, "stopped"); }
Result<core::SandboxInfo> FakeManager::Start(const std::string& id) { return Known(id, "running"); }
Result<core::SandboxInfo> FakeManager::PauseToDisk(const std::string& id) { return Known(id, "paused"); }

asio::awaitable<Result<std::unique_ptr<core::ExecSession>>> FakeManager::StartExec(asio::any_io_executor executor,
                                                                                  const std::string& id,
                                                                                  core::ExecRequest request) {
  Result<core::SandboxInfo> info = Known(id);
  if (!info.ok()) co_return info.error();
  LocalSocket daemon_end(executor), init_end(executor);
  asio::local::connect_pair(daemon_end, init_end);
  asio::co_spawn(executor, EchoInit(std::move(init_end), std::move(request)), asio::detached);
  co_return std::make_unique<core::ExecSession>(std::move(daemon_end));
}

asio::awaitable<Result<core::InitConnection>> FakeManager::ConnectInit(asio::any_io_executor executor,
                                                                       const std::string& id) {
  Result<core::SandboxInfo> info = Known(id);
  if (!info.ok()) co_return info.error();
  LocalSocket daemon_end(executor), init_end(executor);
  asio::local::connect_pair(daemon_end, init_end);
  asio::co_spawn(executor, ScriptedInit(std::move(init_end)), asio::detached);
  co_return core::InitConnection{std::make_unique<core::CtlClient>(std::move(daemon_end)), info->spec, nullptr};
}

Result<UniqueFd> FakeManager::SandboxSocket(const std::string& id, int) {
  Result<core::SandboxInfo> info = Known(id);
  if (!info.ok()) return info.error();
  return MakeError(ErrorCode::kConflict, "sandbox " + id + " is not running", "sandbox_not_running");
}

Result<core::SandboxInfo> FakeManager::SetNetwork(const std::string& id, const core::NetworkPolicy& policy) {
  Result<core::SandboxInfo> info = Known(id);
  if (info.ok()) info->spec.network = policy;
  return info;
}

Result<std::vector<net::EgressRecord>> FakeManager::Egress(const std::string& id, int64_t) {
  Result<core::SandboxInfo> info = Known(id);
  if (!info.ok()) return info.error();
  net::EgressRecord record;
  record.id = 1;
  record.sandbox_id = id;
  record.time_ms = 1714557600000;
  record.protocol = "tcp";
  record.name = "example.com";
  record.address = "93.184.216.34";
  record.port = 443;
  record.allowed = true;
  return std::vector<net::EgressRecord>{record};
}

Result<core::SnapshotInfo> FakeManager::CreateSnapshot(const std::string& sandbox_id, const std::string& name,
                                                       bool memory) {
  Result<core::SandboxInfo> info = Known(sandbox_id);
  if (!info.ok()) return info.error();
  core::SnapshotInfo snapshot = Snapshot();
  snapshot.name = name;
  snapshot.memory = memory;
  return snapshot;
}

std::vector<core::SnapshotInfo> FakeManager::ListSnapshots() { return {Snapshot()}; }

Result<core::SnapshotInfo> FakeManager::GetSnapshot(const std::string& id) {
  if (id != "snap_1") return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
  return Snapshot();
}

Status FakeManager::DeleteSnapshot(const std::string& id) { return GetSnapshot(id).ok() ? Status{} : GetSnapshot(id).error(); }

Result<std::vector<core::SandboxInfo>> FakeManager::Fork(const std::string& sandbox_id, int count, bool /*memory*/) {
  Result<core::SandboxInfo> info = Known(sandbox_id);
  if (!info.ok()) return info.error();
  std::vector<core::SandboxInfo> forks;
  for (int i = 0; i < count; ++i) forks.push_back(Sandbox("fork" + std::to_string(i), "running"));
  return forks;
}

std::vector<core::ImageInfo> FakeManager::ListImages() {
  return {core::ImageInfo{.name = "host", .source = "host", .created_at = "2024-01-01T00:00:00Z", .size_bytes = 0}};
}

Result<core::ImageInfo> FakeManager::ImportImage(const std::string& name, const std::string&, const std::string&) {
  return core::ImageInfo{.name = name, .source = "tarball", .created_at = "2024-05-01T10:00:00Z", .size_bytes = 10240};
}

Result<core::ImageInfo> FakeManager::FindImage(const std::string& name, const std::string&) {
  if (name == "host") return ListImages().front();
  return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
}

Result<core::ImageInfo> FakeManager::PullImage(const storage::PullRequest& request, const storage::PullListener&) {
  return MakeError(ErrorCode::kBadGateway, "no registry " + request.ref.registry + " here", "registry_unreachable");
}

Status FakeManager::DeleteImage(const std::string& name, const std::string&) {
  if (name == "host") return MakeError(ErrorCode::kConflict, "image host is in use");
  return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
}

Result<core::VolumeInfo> FakeManager::CreateVolume(const storage::VolumeKey& key, int64_t size_mb) {
  const std::string& name = key.name;
  if (name == "data") return MakeError(ErrorCode::kConflict, "volume data exists", "volume_exists");
  return core::VolumeInfo{.name = name, .size_mb = size_mb, .created_at = "2024-05-01T10:00:00Z"};
}

Result<core::VolumeInfo> FakeManager::GetVolume(const storage::VolumeKey& key) {
  const std::string& name = key.name;
  if (name != "data") return MakeError(ErrorCode::kNotFound, "no volume " + name, "volume_not_found");
  return core::VolumeInfo{.name = "data", .size_mb = 1024, .created_at = "2024-05-01T10:00:00Z", .used_bytes = 4096,
                          .mounted_by = {"sb1"}};
}

std::vector<core::VolumeInfo> FakeManager::ListVolumes() { return {*GetVolume({.tenant = "", .name = "data"})}; }

Status FakeManager::DeleteVolume(const storage::VolumeKey& key) {
  if (key.name == "data") return MakeError(ErrorCode::kConflict, "volume data is mounted", "volume_in_use");
  return MakeError(ErrorCode::kNotFound, "no volume " + key.name, "volume_not_found");
}

Status FakeManager::ExportSnapshot(const std::string& id, int out_fd) {
  if (id != "snap_1") return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
  const std::string content(4096, 'z');
  if (::write(out_fd, content.data(), content.size()) != ssize_t(content.size())) {
    return SystemError("write export", errno);
  }
  return {};
}

Result<core::SnapshotInfo> FakeManager::ImportSnapshot(int, int64_t, bool) {
  return MakeError(ErrorCode::kInvalid, "not a bulkhead snapshot archive", "invalid_snapshot");
}

core::ManagerStats FakeManager::Stats() {
  core::ManagerStats stats;
  stats.sandboxes_running = 1;
  stats.storage_driver = "overlay";
  return stats;
}

std::string StartFakeDaemon(std::string_view name) {
  spdlog::set_level(spdlog::level::off);
  const std::string dir = MakeTempDir(name);
  auto* manager = new FakeManager();
  api::ServerOptions options;
  options.api_key = kFakeDaemonKey;
  options.io_threads = 1;
  options.blocking_threads = 1;
  options.upload_dir = dir + "/tmp";
  options.preview_domain = "preview.test";
  options.shutdown_grace = std::chrono::milliseconds(200);
  std::filesystem::create_directory(options.upload_dir);
  auto* server = new api::ApiServer(*manager, options);
  const std::string socket_path = dir + "/api.sock";
  Status listening = server->ListenUnix(socket_path);
  if (!listening.ok()) Fail("listen: " + listening.error().message);
  // At exit the server stops and its thread ends before static destructors run: a request still
  // being served when the fuzzer's time is up logged into spdlog's freed registry (ASan saw it).
  static api::ApiServer* serving = server;
  static std::thread* thread = new std::thread([server] { server->Run(); });
  std::atexit([] {
    serving->Stop();
    thread->join();
  });
  return socket_path;
}

}  // namespace bulkhead::fuzz
