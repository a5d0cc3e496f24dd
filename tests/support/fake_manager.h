// A SandboxManager whose sandboxes, images, snapshots and volumes are records in memory, for
// tests of the layers above the core (the HTTP API, the file routes): the core itself is
// tested on a fake tier (fake_tier.h). What a sandbox's init says is the test's to script
// (fake_init.h); the manager records what it was asked.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/sandbox_manager.h"
#include "support/fake_init.h"

namespace bulkhead::testing {

class FakeManager : public core::SandboxManager {
 public:
  // What the sandbox's init does on a connection the daemon opens to it (ConnectInit).
  using ConnectScript = std::function<boost::asio::awaitable<void>(LocalSocket socket, std::string id)>;
  // What init does for one command StartExec started: the request is handed over here, the
  // daemon's ExecSession reads the command's frames from `socket`.
  using ExecScript = std::function<boost::asio::awaitable<void>(LocalSocket socket, core::ExecRequest request)>;

  FakeManager();

  // Seeds records under the ids a test names (Create numbers its own: sb-1, sb-2, ...).
  void AddSandbox(const std::string& id, const core::SandboxSpec& spec = {});
  void AddImage(const std::string& name);
  void AddSnapshot(const core::SnapshotInfo& snapshot);

  Result<core::SandboxInfo> Create(const core::SandboxSpec& spec) override;
  Result<core::SandboxInfo> Get(const std::string& id) override;
  std::vector<core::SandboxInfo> List(const core::ListFilter& filter) override;
  std::optional<std::string> TenantOf(const std::string& id) override;
  Status Delete(const std::string& id) override;
  Result<core::SandboxInfo> SetTimeout(const std::string& id, int64_t timeout_s) override;
  Result<core::SandboxInfo> Pause(const std::string& id) override { return SetState(id, "paused"); }
  Result<core::SandboxInfo> PauseToDisk(const std::string& id) override {
    auto paused = SetState(id, "paused");
    if (paused) paused->paused_to_disk = true;
    return paused;
  }
  Result<core::SandboxInfo> Resume(const std::string& id) override { return SetState(id, "running"); }
  Result<core::SandboxInfo> Stop(const std::string& id) override { return SetState(id, "stopped"); }
  Result<core::SandboxInfo> Start(const std::string& id) override { return SetState(id, "running"); }
  boost::asio::awaitable<Result<std::unique_ptr<core::ExecSession>>> StartExec(boost::asio::any_io_executor executor,
                                                                                const std::string& id,
                                                                                core::ExecRequest request) override;
  boost::asio::awaitable<Result<core::InitConnection>> ConnectInit(boost::asio::any_io_executor executor,
                                                                   const std::string& id) override;
  Result<UniqueFd> SandboxSocket(const std::string& id, int) override { return NotFound(id); }
  Result<core::SandboxInfo> SetNetwork(const std::string& id, const core::NetworkPolicy& policy) override;
  Result<std::vector<net::EgressRecord>> Egress(const std::string& id, int64_t limit) override;
  std::vector<core::ImageInfo> ListImages() override;
  Result<core::ImageInfo> ImportImage(const std::string& name, const std::string& tar_path,
                                      const std::string& tenant) override;
  Status DeleteImage(const std::string& name, const std::string& tenant) override;
  Result<core::ImageInfo> FindImage(const std::string& name, const std::string& tenant) override;
  Result<core::ImageInfo> PullImage(const storage::PullRequest& request, const storage::PullListener& listener) override;
  Result<std::optional<int64_t>> CollectImageGarbage() override { return std::optional<int64_t>(0); }
  Result<core::ImageInfo> StoreBuiltImage(const storage::BuiltImage&, const std::string&, const std::string&,
                                          const std::string&) override {
    return MakeError(ErrorCode::kInternal, "the fake manager builds nothing");
  }
  Result<storage::PushResult> PushImage(const storage::PushRequest& request, const storage::PullListener&) override {
    return MakeError(ErrorCode::kBadGateway, "no registry " + request.target.registry + " here", "registry_unreachable");
  }
  Result<core::VolumeInfo> CreateVolume(const storage::VolumeKey& key, int64_t size_mb) override;
  Result<core::VolumeInfo> GetVolume(const storage::VolumeKey& key) override;
  std::vector<core::VolumeInfo> ListVolumes() override;
  Status DeleteVolume(const storage::VolumeKey& key) override;
  Result<core::SnapshotInfo> CreateSnapshot(const std::string& id, const std::string& name, bool memory) override;
  std::vector<core::SnapshotInfo> ListSnapshots() override;
  Result<core::SnapshotInfo> GetSnapshot(const std::string& id) override;
  Status DeleteSnapshot(const std::string& id) override;
  // The archive format is storage's (tested there); here only the routes' answers.
  Status ExportSnapshot(const std::string& id, int out_fd) override;
  Result<core::SnapshotInfo> ImportSnapshot(int, int64_t, bool) override;
  Result<std::vector<core::SandboxInfo>> Fork(const std::string& id, int count, bool memory) override;
  core::ManagerStats Stats() override;
  std::vector<core::RuntimeInfo> Runtimes() const override {
    return {{"gvisor", false, "no runsc here", {}}, {"native", true, "", {}}};
  }
  const core::DaemonConfig& config() const override { return config_; }
  void Shutdown() override {}

  // Set by the test before the requests that use them (read on the server's thread).
  ConnectScript connect_init;  // unset: the sandbox's init cannot be reached
  ExecScript exec_init;        // unset: likewise
  core::SandboxUsage usage{.cpu_s = 0.5, .memory_bytes = 1 << 20, .disk_bytes = 4096, .pids = 2};  // what Get reads
  std::vector<net::EgressRecord> egress;  // what Egress answers

  // What the manager was asked (guarded by mutex_ while the server runs).
  std::mutex mutex_;
  core::SandboxSpec last_spec;
  core::ExecRequest last_exec;
  int64_t last_egress_limit = 0;
  std::string last_snapshot_name;
  bool last_snapshot_memory = false;  // what the last CreateSnapshot and Fork were asked
  bool last_fork_memory = false;
  std::map<std::string, std::string> imported;  // image name -> the tarball's bytes
  std::string imported_from;                    // the path the last tarball was read from

 private:
  static Error NotFound(const std::string& id);
  static Error Unreachable(const std::string& id);
  Result<core::SandboxInfo> SetState(const std::string& id, const std::string& state);
  core::SandboxInfo& Insert(const std::string& id, const core::SandboxSpec& spec);  // mutex_ held

  std::map<std::string, core::SandboxInfo> sandboxes_;
  std::vector<core::ImageInfo> images_;
  std::vector<core::SnapshotInfo> snapshots_;  // oldest first
  std::map<storage::VolumeKey, core::VolumeInfo> volumes_;
  int next_sandbox_ = 0;
  int next_snapshot_ = 0;
  core::ManagerStats stats_;
  core::DaemonConfig config_;
};

}  // namespace bulkhead::testing
