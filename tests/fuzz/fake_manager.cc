#include "fake_manager.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <spdlog/spdlog.h>

#include "api/server.h"
#include "common/ctl_protocol.h"
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

asio::awaitable<Result<core::InitConnection>> FakeManager::ConnectInit(asio::any_io_executor, const std::string& id) {
  Result<core::SandboxInfo> info = Known(id);
  if (!info.ok()) co_return info.error();
  co_return MakeError(ErrorCode::kConflict, "sandbox " + id + " is not running", "sandbox_not_running");
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

Result<core::SnapshotInfo> FakeManager::CreateSnapshot(const std::string& sandbox_id, const std::string& name) {
  Result<core::SandboxInfo> info = Known(sandbox_id);
  if (!info.ok()) return info.error();
  core::SnapshotInfo snapshot = Snapshot();
  snapshot.name = name;
  return snapshot;
}

std::vector<core::SnapshotInfo> FakeManager::ListSnapshots() { return {Snapshot()}; }

Result<core::SnapshotInfo> FakeManager::GetSnapshot(const std::string& id) {
  if (id != "snap_1") return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
  return Snapshot();
}

Status FakeManager::DeleteSnapshot(const std::string& id) { return GetSnapshot(id).ok() ? Status{} : GetSnapshot(id).error(); }

Result<std::vector<core::SandboxInfo>> FakeManager::Fork(const std::string& sandbox_id, int count) {
  Result<core::SandboxInfo> info = Known(sandbox_id);
  if (!info.ok()) return info.error();
  std::vector<core::SandboxInfo> forks;
  for (int i = 0; i < count; ++i) forks.push_back(Sandbox("fork" + std::to_string(i), "running"));
  return forks;
}

std::vector<core::ImageInfo> FakeManager::ListImages() {
  return {core::ImageInfo{.name = "host", .source = "host", .created_at = "2024-01-01T00:00:00Z", .size_bytes = 0}};
}

Result<core::ImageInfo> FakeManager::ImportImage(const std::string& name, const std::string&) {
  return core::ImageInfo{.name = name, .source = "tarball", .created_at = "2024-05-01T10:00:00Z", .size_bytes = 10240};
}

Status FakeManager::DeleteImage(const std::string& name) {
  if (name == "host") return MakeError(ErrorCode::kConflict, "image host is in use");
  return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
}

Result<core::VolumeInfo> FakeManager::CreateVolume(const std::string& name, int64_t size_mb) {
  if (name == "data") return MakeError(ErrorCode::kConflict, "volume data exists", "volume_exists");
  return core::VolumeInfo{.name = name, .size_mb = size_mb, .created_at = "2024-05-01T10:00:00Z"};
}

Result<core::VolumeInfo> FakeManager::GetVolume(const std::string& name) {
  if (name != "data") return MakeError(ErrorCode::kNotFound, "no volume " + name, "volume_not_found");
  return core::VolumeInfo{.name = "data", .size_mb = 1024, .created_at = "2024-05-01T10:00:00Z", .used_bytes = 4096,
                          .mounted_by = {"sb1"}};
}

std::vector<core::VolumeInfo> FakeManager::ListVolumes() { return {*GetVolume("data")}; }

Status FakeManager::DeleteVolume(const std::string& name) {
  if (name == "data") return MakeError(ErrorCode::kConflict, "volume data is mounted", "volume_in_use");
  return MakeError(ErrorCode::kNotFound, "no volume " + name, "volume_not_found");
}

Status FakeManager::ExportSnapshot(const std::string& id, int out_fd) {
  if (id != "snap_1") return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
  const std::string content(4096, 'z');
  if (::write(out_fd, content.data(), content.size()) != ssize_t(content.size())) {
    return SystemError("write export", errno);
  }
  return {};
}

Result<core::SnapshotInfo> FakeManager::ImportSnapshot(int, int64_t) {
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
  std::filesystem::create_directory(options.upload_dir);
  auto* server = new api::ApiServer(*manager, options);
  const std::string socket_path = dir + "/api.sock";
  Status listening = server->ListenUnix(socket_path);
  if (!listening.ok()) Fail("listen: " + listening.error().message);
  std::thread([server] { server->Run(); }).detach();
  return socket_path;
}

}  // namespace bulkhead::fuzz
