// A SandboxManager for fuzzing the HTTP layer: a fixed world (sandbox "sb1" running, "sb2"
// paused, one snapshot, one volume, the host image) answered quickly and deterministically,
// whatever the requests do. Nothing accumulates, so millions of requests keep memory flat.
// Exec runs a scripted init that echoes the command; connections to init (files, processes,
// attach) reach a scripted init speaking ctl_protocol.h: two processes (pid 12 "web" running,
// pid 13 exited), file operations that succeed, an attach that echoes stdin as output.
#pragma once
#include <string>

#include "core/sandbox_manager.h"

namespace bulkhead::fuzz {

class FakeManager : public core::SandboxManager {
 public:
  Result<core::SandboxInfo> Create(const core::SandboxSpec& spec) override;
  Result<core::SandboxInfo> Get(const std::string& id) override;
  std::vector<core::SandboxInfo> List(const core::ListFilter& filter) override;
  std::optional<std::string> TenantOf(const std::string& id) override;
  Status Delete(const std::string& id) override;
  Result<core::SandboxInfo> SetTimeout(const std::string& id, int64_t timeout_s) override;
  Result<core::SandboxInfo> Pause(const std::string& id) override;
  Result<core::SandboxInfo> Resume(const std::string& id) override;
  Result<core::SandboxInfo> Stop(const std::string& id) override;
  Result<core::SandboxInfo> Start(const std::string& id) override;
  Result<core::SandboxInfo> PauseToDisk(const std::string& id) override;
  boost::asio::awaitable<Result<std::unique_ptr<core::ExecSession>>> StartExec(
      boost::asio::any_io_executor executor, const std::string& id, core::ExecRequest request) override;
  boost::asio::awaitable<Result<core::InitConnection>> ConnectInit(boost::asio::any_io_executor executor,
                                                                   const std::string& id) override;
  Result<UniqueFd> SandboxSocket(const std::string& id, int domain) override;
  Result<core::SandboxInfo> SetNetwork(const std::string& id, const core::NetworkPolicy& policy) override;
  Result<std::vector<net::EgressRecord>> Egress(const std::string& id, int64_t limit) override;
  Result<core::SnapshotInfo> CreateSnapshot(const std::string& sandbox_id, const std::string& name,
                                           bool memory) override;
  std::vector<core::SnapshotInfo> ListSnapshots() override;
  Result<core::SnapshotInfo> GetSnapshot(const std::string& id) override;
  Status DeleteSnapshot(const std::string& id) override;
  Result<std::vector<core::SandboxInfo>> Fork(const std::string& sandbox_id, int count, bool memory) override;
  std::vector<core::ImageInfo> ListImages() override;
  Result<core::ImageInfo> ImportImage(const std::string& name, const std::string& tar_path,
                                      const std::string& tenant) override;
  Status DeleteImage(const std::string& name, const std::string& tenant) override;
  Result<core::ImageInfo> FindImage(const std::string& name, const std::string& tenant) override;
  Result<core::ImageInfo> PullImage(const storage::PullRequest& request, const storage::PullListener& listener) override;
  Result<std::optional<int64_t>> CollectImageGarbage() override { return std::optional<int64_t>(0); }
  Result<core::ImageInfo> StoreBuiltImage(const storage::BuiltImage&, const std::string&, const std::string&,
                                          const std::string&) override {
    return MakeError(ErrorCode::kInternal, "the fuzzers' manager builds nothing");
  }
  Result<storage::PushResult> PushImage(const storage::PushRequest& request, const storage::PullListener&) override {
    return MakeError(ErrorCode::kBadGateway, "no registry " + request.target.registry + " here", "registry_unreachable");
  }
  Result<core::VolumeInfo> CreateVolume(const storage::VolumeKey& key, int64_t size_mb) override;
  Result<core::VolumeInfo> GetVolume(const storage::VolumeKey& key) override;
  std::vector<core::VolumeInfo> ListVolumes() override;
  Status DeleteVolume(const storage::VolumeKey& key) override;
  Status ExportSnapshot(const std::string& id, int out_fd) override;
  Result<core::SnapshotInfo> ImportSnapshot(int in_fd, int64_t max_bytes, bool memory) override;
  core::ManagerStats Stats() override;
  const core::DaemonConfig& config() const override { return config_; }
  void Shutdown() override {}

 private:
  Result<core::SandboxInfo> Known(const std::string& id, const std::string& state = {});
  core::DaemonConfig config_;
};

// The daemon's real ApiServer in front of a FakeManager, listening on a unix socket in a new
// temporary directory and running on threads of its own until the process exits (never torn
// down, so no exit-time destructor races it). Logging is off. Answers the socket's path.
inline constexpr const char* kFakeDaemonKey = "fuzz-key-0123456789";
std::string StartFakeDaemon(std::string_view name);

}  // namespace bulkhead::fuzz
