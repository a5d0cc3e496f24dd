#include "core/sandbox_manager.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>
#include <tuple>

#include "common/ctl_protocol.h"
#include "common/digest.h"
#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "core/network_controller.h"
#include "core/spec_json.h"
#include "core/state_dir.h"
#include "core/volume_registry.h"
#include "net/netns.h"
#include "runtime/native/cgroup.h"
#include "runtime/native/native_runtime.h"
#include "runtime/native/uid_range.h"
#include "storage/snapshot_archive.h"
#include "storage/storage.h"
#include "store/state_db.h"
#include "common/random_hex.h"
#include "common/time_format.h"

namespace bulkhead::core {
namespace fs = std::filesystem;
using runtime::InitProcess;

namespace {

// 20 characters of [a-z0-9]: unguessable (~103 bits) and short enough for socket paths.
std::string NewId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char raw[20];
  (void)!::getrandom(raw, sizeof raw, 0);
  std::string id;
  for (unsigned char c : raw) id += kAlphabet[c % 36];
  return id;
}

// The name of a sandbox's objects on the host that any local user can list (its cgroups, the
// directory of its control socket, seen in /proc/net/unix): derived from the id but never the
// id itself, which is a capability (preview host names need nothing else). 64 bits of a
// SHA-256 of an unguessable id tell nothing about it.
std::string HostName(const std::string& id) { return "sb-" + HexEncode(Sha256(id)).substr(0, 16); }

// Preview tokens are as long as the API key: 32 random bytes, 64 hex digits.
constexpr size_t kPreviewTokenBytes = 32;

// A new sandbox's preview access: a private one gets a token of its own, never the one of
// the spec it was copied from (a fork's parent, a snapshot's sandbox).
Status IssuePreviewToken(PreviewAccess& preview) {
  preview.token.clear();
  if (preview.is_public) return {};
  auto token = RandomHex(kPreviewTokenBytes);
  if (!token) return token.error();
  preview.token = std::move(*token);
  return {};
}

std::string Fnv1aHex(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}

std::string InitBinaryPath() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& p : {self.parent_path() / "bulkhead-init", fs::path("/usr/local/lib/bulkhead/bulkhead-init"),
                            fs::path("/usr/lib/bulkhead/bulkhead-init")})
    if (fs::exists(p, ec)) return p.string();
  return (self.parent_path() / "bulkhead-init").string();
}

// A sandbox as the manager tracks it in memory.
struct Sandbox {
  SandboxInfo info;
  uid_t uid_base = 0;
  InitProcess init;
  int64_t expires_ms = 0;  // unix milliseconds; 0 = never (and while paused or stopped)
  bool deleting = false;
  int64_t last_activity_ms = 0;  // the last API call that needed it (idle_timeout_s)
  int64_t booted_ms = 0;         // when its init last started (unix ms)
  int64_t next_sample_ms = 0;    // when its usage is to be sampled next (usage_history_)
  int64_t disk_bytes = 0;        // SampledDiskBytes' last walk of its layer, and when
  int64_t disk_measured_ms = 0;
  int busy = 0;                  // API sessions using it now (never idle-paused meanwhile)
  std::mutex lifecycle_mu;       // one pause/resume/stop/start/delete at a time
  // The sandbox's network namespace, opened while its init is known alive (no pid reuse).
  UniqueFd netns;
  std::mutex network_mu;  // one network change at a time
  std::shared_ptr<OutputBudget> output_budget;  // made at its first exec or attach; null = no cap
};

// Where a new sandbox's files come from: nothing (an empty workspace) or a snapshot.
struct LayerSource {
  std::string snapshot_id;
  uid_t uid_base = 0;  // the range the snapshot's owners are in
};

// A ready snapshot as the manager tracks it in memory.
struct SnapshotEntry {
  SnapshotInfo info;
  uid_t uid_base = 0;
  std::string spec_json;  // the settings of the sandbox it was taken of
  int users = 0;          // creates, pool refills and exports reading it now (UseSnapshot)
  int refills = 0;        // of those, warm-pool refills: a delete waits for them instead of refusing
};

// What every command in a sandbox with egress gets, so that programs that honour proxy
// settings use the explicit proxy (the rest is redirected to it anyway).
std::map<std::string, std::string> ProxyEnv() {
  const std::string proxy = "http://127.0.0.1:" + std::to_string(net::kProxyPort);
  const std::string direct = "localhost,127.0.0.1,::1";
  return {{"HTTP_PROXY", proxy}, {"HTTPS_PROXY", proxy}, {"ALL_PROXY", proxy}, {"http_proxy", proxy},
          {"https_proxy", proxy}, {"all_proxy", proxy}, {"NO_PROXY", direct}, {"no_proxy", direct}};
}

}  // namespace

nlohmann::json InitExecPayload(const ExecRequest& request, const SandboxSpec& spec) {
  std::map<std::string, std::string> env;
  if (spec.network.mode != "none") env = ProxyEnv();
  for (const auto& [k, v] : spec.env) env[k] = v;
  for (const auto& [k, v] : request.env) env[k] = v;
  nlohmann::json env_list = nlohmann::json::array();
  for (const auto& [k, v] : env) env_list.push_back(k + "=" + v);
  nlohmann::json payload = {{"argv", request.argv},
                            {"env", env_list},
                            {"cwd", request.cwd.value_or(spec.workdir)},
                            {"user", request.user.value_or(spec.user)},
                            {"timeout_ms", request.timeout_s * 1000},
                            {"stdin", request.stdin_data.has_value()}};
  if (request.output_limit) payload["output_limit"] = *request.output_limit;
  payload["nofile"] = runtime::native::Cgroups::DescriptorLimit(spec.memory_mb * 1024 * 1024);
  return payload;
}

class SandboxManagerImpl : public SandboxManager {
 public:
  SandboxManagerImpl(DaemonConfig config, UniqueFd lock, std::unique_ptr<store::StateDb> db,
                     std::unique_ptr<NetworkController> network, std::unique_ptr<storage::Storage> storage,
                     std::unique_ptr<runtime::native::NativeRuntime> runtime, std::string host_rootfs)
      : config_(std::move(config)),
        lock_(std::move(lock)),
        db_(std::move(db)),
        network_(std::move(network)),
        storage_(std::move(storage)),
        runtime_(std::move(runtime)),
        uids_(config_.state_dir),
        host_rootfs_(std::move(host_rootfs)) {}

  ~SandboxManagerImpl() override { Shutdown(); }

  Status Recover();
  void StartBackground();

  Result<SandboxInfo> Create(const SandboxSpec& spec) override;
  Result<SandboxInfo> Get(const std::string& id) override;
  Result<std::vector<UsageSample>> UsageSamples(const std::string& id, int64_t from_ms, int64_t to_ms) override;
  std::vector<SandboxInfo> List(const ListFilter& filter) override;
  Status Delete(const std::string& id) override;
  Result<SandboxInfo> SetTimeout(const std::string& id, int64_t timeout_s) override;
  Result<SandboxInfo> Pause(const std::string& id) override { return SetPaused(id, true); }
  Result<SandboxInfo> Resume(const std::string& id) override { return SetPaused(id, false); }
  Result<SandboxInfo> Stop(const std::string& id) override;
  Result<SandboxInfo> Start(const std::string& id) override;
  Result<UniqueFd> SandboxSocket(const std::string& id, int domain) override;
  Result<SandboxInfo> SetNetwork(const std::string& id, const NetworkPolicy& policy) override;
  Result<std::vector<net::EgressRecord>> Egress(const std::string& id, int64_t limit) override;
  void AddDaemonListener(const net::DaemonListener& listener) override { network_->AddDaemonListener(listener); }
  boost::asio::awaitable<Result<std::unique_ptr<ExecSession>>> StartExec(boost::asio::any_io_executor executor,
                                                                         const std::string& id,
                                                                         ExecRequest request) override;
  boost::asio::awaitable<Result<InitConnection>> ConnectInit(boost::asio::any_io_executor executor,
                                                             const std::string& id) override;
  std::vector<ImageInfo> ListImages() override { return storage_->ListImages(); }
  Result<ImageInfo> ImportImage(const std::string& name, const std::string& tar_path) override {
    return storage_->ImportImage(name, tar_path);
  }
  Status DeleteImage(const std::string& name) override;
  Result<VolumeInfo> CreateVolume(const std::string& name, int64_t size_mb) override {
    return volumes_.Create(name, size_mb);
  }
  Result<VolumeInfo> GetVolume(const std::string& name) override { return volumes_.Get(name); }
  std::vector<VolumeInfo> ListVolumes() override { return volumes_.List(); }
  Status DeleteVolume(const std::string& name) override { return volumes_.Delete(name); }
  ManagerStats Stats() override;
  const DaemonConfig& config() const override { return config_; }
  void Shutdown() override;
  Result<SnapshotInfo> CreateSnapshot(const std::string& sandbox_id, const std::string& name) override;
  std::vector<SnapshotInfo> ListSnapshots() override;
  Result<SnapshotInfo> GetSnapshot(const std::string& id) override;
  Status DeleteSnapshot(const std::string& id) override;
  Result<std::vector<SandboxInfo>> Fork(const std::string& sandbox_id, int count) override;
  Status ExportSnapshot(const std::string& id, int out_fd) override;
  Result<SnapshotInfo> ImportSnapshot(int in_fd, int64_t max_bytes) override;

 private:
  // Snapshots (the section at the end of this file).
  void RecoverSnapshots();
  // Writes a "creating" row, captures the sandbox's files (frozen if running), thaws.
  Result<store::SnapshotRow> Capture(const std::string& sandbox_id, const std::string& name);
  void DropSnapshot(const std::string& id);
  // A copy of a ready snapshot's entry, and a token that keeps DeleteSnapshot away (409) while
  // it lives; a warm-pool `refill` only delays it. 404 if there is none.
  Result<std::pair<SnapshotEntry, std::shared_ptr<void>>> UseSnapshot(const std::string& id, bool refill = false);
  // Gives a sandbox from a warm pool (made with other settings) this request's: limits, disk
  // cap and spec. False (the sandbox torn down) if that fails; then the caller launches one.
  bool FitPooled(Sandbox& sb, const SandboxSpec& spec);
  Result<SandboxInfo> CreateFromSnapshot(SandboxSpec spec);
  // Hands out a launched sandbox: network, lifetime, row, listing (what Create does last).
  Result<SandboxInfo> Admit(const std::shared_ptr<Sandbox>& sb);

  std::string SandboxDir(const std::string& id) const { return config_.state_dir + "/sandboxes/" + HostName(id); }
  std::string CtlPath(const std::string& id) const { return SandboxDir(id) + "/ctl.sock"; }
  // Pooled sandboxes start with network mode none and no sudo users; Create gives them the
  // requested ones. Volumes are attached and snapshot files copied at launch: such sandboxes
  // never come from the pool.
  bool PoolEligible(const SandboxSpec& spec) const {
    return spec.image == "host" && spec.runtime == "native" && spec.volumes.empty() && !spec.from_snapshot;
  }
  // Tells a booted sandbox's init who may use its sudo (ctl::kSudoUsers); nothing to do without
  // sudo users (init boots with none).
  Status GrantSudo(const Sandbox& sb, const SandboxSpec& spec) const;
  store::SandboxRow RowOf(const Sandbox& sb) const;
  // The live (not being deleted) sandbox with this id, or nullptr. Caller holds mu_.
  std::shared_ptr<Sandbox> FindLocked(const std::string& id) const;
  // Makes a running sandbox. Its row stays "starting" until the caller sets the state it
  // hands the sandbox out in and writes the row (once): a crash before that is cleaned up.
  Result<std::shared_ptr<Sandbox>> Launch(const SandboxSpec& spec, const LayerSource& source = {});
  // Starts the sandbox's init on its writable layer: sets sb.init and sb.netns.
  Status Boot(Sandbox& sb, const storage::WritableLayer& layer);
  // A sandbox locked for a lifecycle change. `life` is released before `sandbox` (members go
  // in reverse order), so the reference keeps the mutex alive until it is unlocked, even when
  // it is the last one (Delete has erased the sandbox from the map).
  struct LockedSandbox {
    std::shared_ptr<Sandbox> sandbox;
    std::unique_lock<std::mutex> life;
  };
  // The live sandbox with this id (404 otherwise), locked for a lifecycle change while the
  // caller holds the answer. 404 too if it was deleted while we waited.
  Result<LockedSandbox> LockForChange(const std::string& id);
  // Pause/Resume with the sandbox's lifecycle lock held.
  Status FreezeLocked(Sandbox& sb, bool frozen);
  Result<SandboxInfo> SetPaused(const std::string& id, bool paused);
  // A token that keeps the sandbox counted as busy while it lives.
  std::shared_ptr<void> BusyToken(const std::shared_ptr<Sandbox>& sb);
  // The sandbox's output relay budget (output_budget.h), made on first use; null if uncapped.
  std::shared_ptr<OutputBudget> OutputBudgetLocked(Sandbox& sb);
  // Frees everything a sandbox may hold; each step tolerates the resource being absent.
  Status Teardown(const std::string& id, uid_t uid_base, const InitProcess& init);
  void ApplyLifetime(Sandbox& sb, int64_t timeout_s);
  // The created_at of a sandbox made now: the time to the millisecond, and later than that of
  // every sandbox made before it (a millisecond past the last when the clock has not moved on
  // or went back), so that created_at orders sandboxes as they were made.
  std::string NextCreatedAt();
  // The network namespace of a sandbox's init, checked to be that init's (not a reused pid).
  Result<UniqueFd> OpenLiveNetns(const InitProcess& init);
  // The running sandbox with this id, resumed first if paused; 404 if unknown, 409 if not
  // running (an init found dead marks it "error"). Counts as API activity.
  Result<std::shared_ptr<Sandbox>> RunningSandbox(const std::string& id);
  // Its network namespace, or 409 (only a sandbox whose namespace could not be reopened after
  // a daemon restart lacks one).
  static Result<int> NetnsOf(const Sandbox& sb);
  void PoolLoop();
  // A warm snapshot without its ready sandbox, or "". Caller holds mu_.
  std::string SnapshotToWarmLocked() const;
  // Launches the ready sandbox of a warm snapshot (PoolLoop).
  void RefillSnapshotPool(const std::string& snapshot_id);
  void TimerLoop();
  // Samples the usage of the running sandboxes whose turn it is, the longest waiting first and
  // at most kSamplesPerTick of them: with many running, each is sampled less often, and the
  // host's cost stays bounded.
  void SampleUsage(int64_t now);
  // One sample of a sandbox into usage_history_ (nothing if it is gone meanwhile).
  void RecordUsage(const std::string& id, double cpus, int64_t started_ms);
  int64_t SampledDiskBytes(const std::string& id, int64_t now);
  static constexpr size_t kSamplesPerTick = 50;  // 200 a second at the timer's 250 ms

  DaemonConfig config_;
  UniqueFd lock_;
  std::unique_ptr<store::StateDb> db_;
  std::unique_ptr<NetworkController> network_;  // writes to db_
  std::unique_ptr<storage::Storage> storage_;
  std::unique_ptr<runtime::native::NativeRuntime> runtime_;
  VolumeRegistry volumes_{*db_, *storage_};
  runtime::native::UidRanges uids_;
  std::mutex uids_mu_;
  std::string host_rootfs_;

  std::mutex mu_;  // guards sandboxes_, pool_ and stats_
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::map<std::string, SnapshotEntry> snapshots_;  // ready ones
  std::deque<std::shared_ptr<Sandbox>> pool_;
  // One ready sandbox for each recently used snapshot (the last kWarmSnapshots, most recent
  // last), which from_snapshot takes as a create takes one of pool_. Only with warm_pool > 0.
  static constexpr size_t kWarmSnapshots = 4;
  std::deque<std::string> warm_snapshots_;
  std::map<std::string, std::shared_ptr<Sandbox>> snapshot_pool_;
  ManagerStats stats_;

  UsageHistory usage_history_;
  int64_t usage_trimmed_ms_ = 0;  // timer thread only
  std::atomic<int64_t> last_created_ms_{0};  // NextCreatedAt's last, and Recover's newest row
  std::atomic<bool> stopping_{false};
  std::condition_variable wake_;
  std::condition_variable snapshot_released_;  // a UseSnapshot token ended
  std::thread pool_thread_, timer_thread_;
  std::once_flag shutdown_once_;
};

// ---------------------------------------------------------------------------------------

Result<std::unique_ptr<SandboxManager>> SandboxManager::Open(const DaemonConfig& config) {
  BH_TRY(SecureStateDir(config.state_dir));
  std::error_code ec;
  // <state>/sandboxes/<20 chars>/ctl.sock must fit a unix socket path (107 bytes).
  if (config.state_dir.size() > 70)
    return MakeError(ErrorCode::kInvalid, "state dir path too long (max 70 characters): " + config.state_dir);
  fs::create_directories(config.state_dir + "/sandboxes", ec);
  ::chmod((config.state_dir + "/sandboxes").c_str(), 0700);

  UniqueFd lock(::open((config.state_dir + "/daemon.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock) return SystemError("open daemon.lock", errno);
  // A daemon killed in the middle of a launch leaves the lock with the half-made child until
  // it execs init (the descriptor is close-on-exec): a restart right after waits that out.
  for (int attempt = 0; ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0; ++attempt) {
    if (errno != EWOULDBLOCK || attempt == 100)
      return MakeError(ErrorCode::kConflict, "another bulkhead daemon is using " + config.state_dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  auto db = store::StateDb::Open(config.state_dir + "/bulkhead.db");
  if (!db) return db.error();
  auto storage = storage::Storage::Open(config.state_dir, config.storage_gb, config.storage_driver);
  if (!storage) return storage.error();
  auto host = (*storage)->EnsureHostImage(InitBinaryPath());
  if (!host) return host.error();
  auto rt = runtime::native::NativeRuntime::Create(Fnv1aHex(fs::weakly_canonical(config.state_dir).string()),
                                                   InitBinaryPath());
  if (!rt) return rt.error();
  if (!(*storage)->quotas_enforced()) spdlog::warn("disk quotas are not enforced on this host");

  auto network = NetworkController::Start(config, **db);
  if (!network) return network.error();
  auto mgr = std::make_unique<SandboxManagerImpl>(config, std::move(lock), std::move(*db), std::move(*network),
                                                  std::move(*storage), std::move(*rt), std::move(*host));
  BH_TRY(mgr->Recover());
  mgr->StartBackground();
  return std::unique_ptr<SandboxManager>(std::move(mgr));
}

// After a restart: re-attach to sandboxes whose init still runs, and free everything a
// crash left half-made (rows still "starting" or "pooled", cgroups and layers without a row).
Status SandboxManagerImpl::Recover() {
  BH_TRY(volumes_.Recover());
  auto rows = db_->LoadAll();
  if (!rows) return rows.error();
  std::set<std::string> known;
  std::error_code ec;
  for (auto& row : *rows) {
    InitProcess init{static_cast<pid_t>(row.init_pid), row.init_start_time};
    if (row.state == "starting" || row.state == "pooled" || row.state == "deleting") {
      spdlog::info("recover: removing unfinished sandbox {} ({})", row.id, row.state);
      (void)Teardown(row.id, row.uid_base, init);
      continue;
    }
    auto spec = SpecFromJson(row.spec_json);
    if (!spec) {
      spdlog::error("recover: sandbox {}: {}", row.id, spec.error().message);
      continue;
    }
    auto sb = std::make_shared<Sandbox>();
    sb->info.id = row.id;
    sb->info.spec = *spec;
    sb->info.parent_snapshot = spec->from_snapshot;
    sb->info.created_at = row.created_at;
    sb->uid_base = row.uid_base;
    sb->init = init;
    sb->expires_ms = row.expires_at_ms;
    if (row.expires_at_ms) sb->info.expires_at = Rfc3339Millis(row.expires_at_ms);
    if (auto created = ParseRfc3339Millis(row.created_at); created && *created > last_created_ms_)
      last_created_ms_ = *created;
    // A sandbox of a version that named its host objects by the id: renamed in place (its
    // processes and control socket carry on; /proc/net/unix keeps the old path until a restart).
    (void)runtime_->Rename(row.id, HostName(row.id));
    if (std::string old_dir = config_.state_dir + "/sandboxes/" + row.id; fs::exists(old_dir, ec))
      fs::rename(old_dir, SandboxDir(row.id), ec);
    if ((row.state == "running" || row.state == "paused") && runtime_->Alive(init)) {
      // The row says what was asked; the cgroup is brought to it. A frozen group under a
      // "running" row is a snapshot or a pause the crash cut short: thaw it.
      sb->info.state = row.state;
      if (auto st = runtime_->SetFrozen(HostName(row.id), row.state == "paused"); !st)
        spdlog::error("recover: sandbox {}: {}", row.id, st.error().message);
      if (sb->info.state == "paused") sb->expires_ms = 0, sb->info.expires_at.reset();
      sb->last_activity_ms = UnixMillis();
      // When it booted is not kept: its CPU share is first counted from its creation.
      sb->booted_ms = ParseRfc3339Millis(row.created_at).value_or(0);
      (void)uids_.Reclaim(row.uid_base, row.id);
      if (auto netns = OpenLiveNetns(init)) {
        sb->netns = std::move(*netns);
        // The listeners in its namespace died with the old daemon: serve it again.
        if (sb->info.spec.network.mode != "none") {
          if (auto st = network_->Apply(row.id, sb->netns.get(), sb->info.spec.network); !st)
            spdlog::error("recover: sandbox {}: network: {}", row.id, st.error().message);
        }
      }
      spdlog::info("recover: re-attached to sandbox {} (init pid {})", row.id, init.pid);
    } else {
      // Its processes are gone (host reboot, or killed) or it was stopped: the files stay,
      // the sandbox is stopped, and POST .../start boots it again.
      sb->info.state = "stopped";
      sb->init = {};
      sb->expires_ms = 0;
      sb->info.expires_at.reset();
      (void)runtime_->Destroy(HostName(row.id), init);
      (void)uids_.Reclaim(row.uid_base, row.id);
      (void)db_->Put(RowOf(*sb));
      if (row.state != "stopped") spdlog::info("recover: sandbox {} is stopped (its init is gone)", row.id);
    }
    known.insert(row.id);
    volumes_.Attach(row.id, sb->info.spec.volumes);
    sandboxes_[row.id] = sb;
  }
  std::set<std::string> known_names;
  for (const auto& id : known) known_names.insert(HostName(id));
  for (const auto& name : runtime_->ListCgroups())
    if (!known_names.count(name)) (void)runtime_->Destroy(name, {});
  for (const auto& id : storage_->ListLayers())
    if (!known.count(id)) (void)storage_->DestroyLayer(id);
  RecoverSnapshots();
  for (const auto& entry : fs::directory_iterator(config_.state_dir + "/sandboxes", ec))
    if (!known_names.count(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
  stats_.sandboxes_running = static_cast<int64_t>(sandboxes_.size());
  return {};
}

void SandboxManagerImpl::StartBackground() {
  if (config_.warm_pool > 0) pool_thread_ = std::thread([this] { PoolLoop(); });
  timer_thread_ = std::thread([this] { TimerLoop(); });
}

store::SandboxRow SandboxManagerImpl::RowOf(const Sandbox& sb) const {
  store::SandboxRow r;
  r.id = sb.info.id;
  r.state = sb.info.state;
  r.spec_json = SpecToJson(sb.info.spec);
  r.created_at = sb.info.created_at;
  r.expires_at_ms = sb.expires_ms;
  r.uid_base = sb.uid_base;
  r.init_pid = sb.init.pid;
  r.init_start_time = sb.init.start_time;
  return r;
}

std::shared_ptr<Sandbox> SandboxManagerImpl::FindLocked(const std::string& id) const {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second->deleting) return nullptr;
  return it->second;
}

Error NoSandbox(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, "no sandbox " + id, "sandbox_not_found");
}

Result<std::shared_ptr<Sandbox>> SandboxManagerImpl::Launch(const SandboxSpec& spec, const LayerSource& source) {
  auto sb = std::make_shared<Sandbox>();
  sb->info.id = NewId();
  sb->info.spec = spec;
  BH_TRY(IssuePreviewToken(sb->info.spec.preview));
  sb->info.parent_snapshot = spec.from_snapshot;
  sb->info.state = "starting";
  sb->info.created_at = NextCreatedAt();
  const std::string& id = sb->info.id;
  if (spec.image != "host") {
    auto image = storage_->ImageRootfs(spec.image);
    if (!image) return image.error();
  }
  {
    std::lock_guard lock(uids_mu_);
    auto base = uids_.Claim(id);
    if (!base) return base.error();
    sb->uid_base = *base;
  }
  // The row exists before any resource does, so a crash at any point below is cleaned up
  // by Recover().
  if (auto st = db_->Put(RowOf(*sb)); !st) {
    std::lock_guard lock(uids_mu_);
    uids_.Release(sb->uid_base);
    return st.error();
  }
  ScopeGuard undo([&] { (void)Teardown(id, sb->uid_base, sb->init); });

  auto layer = source.snapshot_id.empty()
                   ? storage_->CreateLayer(id, sb->uid_base, sb->uid_base, spec.disk_mb)
                   : storage_->CreateLayerFromSnapshot(
                         id, source.snapshot_id, {source.uid_base, sb->uid_base, kIdCount}, spec.disk_mb);
  if (!layer) return layer.error();
  BH_TRY(Boot(*sb, *layer));
  undo.Dismiss();
  return sb;
}

Status SandboxManagerImpl::Boot(Sandbox& sb, const storage::WritableLayer& layer) {
  const SandboxSpec& spec = sb.info.spec;
  runtime::LaunchSpec ls;
  ls.id = HostName(sb.info.id);
  if (spec.image == "host") {
    ls.rootfs = host_rootfs_;
    ls.host_binds = storage_->HostBindDirs();
  } else {
    auto image = storage_->ImageRootfs(spec.image);
    if (!image) return image.error();
    ls.rootfs = *image;
  }
  ls.upper = layer.upper;
  ls.work = layer.work;
  ls.staging = SandboxDir(sb.info.id);
  if (::mkdir(ls.staging.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + ls.staging, errno);
  ls.ctl_socket = CtlPath(sb.info.id);
  ls.host_uid = sb.uid_base;
  ls.limits = {spec.cpus, spec.memory_mb, spec.pids};
  auto volume_binds = volumes_.Acquire(sb.info.id, spec.volumes);  // marks them in use (again)
  if (!volume_binds) return volume_binds.error();
  ls.volumes = std::move(*volume_binds);
  auto init = runtime_->Launch(ls);
  if (!init) return init.error();
  sb.init = *init;
  sb.booted_ms = UnixMillis();
  auto netns = OpenLiveNetns(sb.init);
  if (!netns) return netns.error();
  sb.netns = std::move(*netns);
  return GrantSudo(sb, spec);
}

Status SandboxManagerImpl::GrantSudo(const Sandbox& sb, const SandboxSpec& spec) const {
  if (spec.sudo_users.empty()) return {};
  constexpr std::chrono::seconds kInitAnswer{10};  // a fresh init answers at once; a stuck one must not hold a create
  auto answer = CallInitBlocking(CtlPath(sb.info.id), ctl::kSudoUsers,
                                 nlohmann::json{{"users", spec.sudo_users}}.dump(), kInitAnswer);
  if (!answer) return answer.error();
  if (answer->type != ctl::kResult)
    return InitProtocolError("kSudoUsers answered with frame type " + std::to_string(answer->type));
  return {};
}

Status SandboxManagerImpl::Teardown(const std::string& id, uid_t uid_base, const InitProcess& init) {
  Status first;
  auto note = [&](Status st) {
    if (!st && first) first = st;
  };
  network_->Forget(id);
  note(runtime_->Destroy(HostName(id), init));
  note(storage_->DestroyLayer(id));
  volumes_.Release(id);  // its volumes' data stays
  std::error_code ec;
  fs::remove_all(SandboxDir(id), ec);
  {
    std::lock_guard lock(uids_mu_);
    uids_.Release(uid_base);
  }
  // Keep the row if something is left behind, so that the next start retries.
  if (first.ok())
    note(db_->Remove(id));
  else
    spdlog::warn("teardown of {}: {}", id, first.error().message);
  return first;
}

void SandboxManagerImpl::ApplyLifetime(Sandbox& sb, int64_t timeout_s) {
  sb.info.spec.timeout_s = timeout_s;
  sb.expires_ms = timeout_s > 0 ? UnixMillis() + timeout_s * 1000 : 0;
  if (sb.expires_ms)
    sb.info.expires_at = Rfc3339Millis(sb.expires_ms);
  else
    sb.info.expires_at.reset();
}

std::string SandboxManagerImpl::NextCreatedAt() {
  int64_t last = last_created_ms_.load();
  int64_t next = 0;
  do {
    next = std::max(UnixMillis(), last + 1);
  } while (!last_created_ms_.compare_exchange_weak(last, next));
  return Rfc3339Millis(next);
}

Result<SandboxInfo> SandboxManagerImpl::Create(const SandboxSpec& spec) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  if (spec.from_snapshot) return CreateFromSnapshot(spec);
  if (spec.image != "host" && !storage_->ImageExists(spec.image))
    return MakeError(ErrorCode::kNotFound, "no image named " + spec.image, "image_not_found");
  std::shared_ptr<Sandbox> sb;
  {
    std::lock_guard lock(mu_);
    if (static_cast<int64_t>(sandboxes_.size()) >= config_.max_sandboxes)
      return MakeError(ErrorCode::kTooMany, "sandbox limit reached (" + std::to_string(config_.max_sandboxes) + ")");
    if (PoolEligible(spec) && !pool_.empty()) {
      sb = pool_.front();
      pool_.pop_front();
      stats_.warm_pool_hits_total++;
    } else if (PoolEligible(spec)) {
      stats_.warm_pool_misses_total++;
    }
  }
  wake_.notify_all();
  if (sb && FitPooled(*sb, spec)) return Admit(sb);
  auto launched = Launch(spec);
  if (!launched) {
    std::lock_guard lock(mu_);
    stats_.sandbox_create_failures_total++;
    return launched.error();
  }
  return Admit(*launched);
}

bool SandboxManagerImpl::FitPooled(Sandbox& sb, const SandboxSpec& spec) {
  PreviewAccess preview = spec.preview;
  Status st = IssuePreviewToken(preview);
  if (st) st = runtime_->SetLimits(HostName(sb.info.id), {spec.cpus, spec.memory_mb, spec.pids});
  if (st) st = storage_->SetLayerQuota(sb.info.id, spec.disk_mb);
  if (st) st = GrantSudo(sb, spec);
  if (!st) {
    spdlog::warn("warm pool: sandbox {}: {}", sb.info.id, st.error().message);
    (void)Teardown(sb.info.id, sb.uid_base, sb.init);
    return false;
  }
  sb.info.spec = spec;
  sb.info.spec.preview = std::move(preview);
  sb.info.parent_snapshot = spec.from_snapshot;
  sb.info.created_at = NextCreatedAt();
  return true;
}


Result<SandboxInfo> SandboxManagerImpl::Get(const std::string& id) {
  SandboxInfo info;
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return NoSandbox(id);
    info = sb->info;  // (reading it is not activity: a dashboard must not keep it awake)
  }
  SandboxUsage usage;
  if (info.state == "running") {
    if (auto u = runtime_->Usage(HostName(id))) usage = *u;
  }
  if (auto d = storage_->LayerUsageBytes(id)) usage.disk_bytes = *d;
  info.usage = usage;
  return info;
}

std::vector<SandboxInfo> SandboxManagerImpl::List(const ListFilter& filter) {
  // Keyed by created_at as a time (the rows of older versions have whole seconds), so that
  // they sort as they were made; ties (only such older rows) by id.
  std::vector<std::pair<int64_t, SandboxInfo>> found;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, sb] : sandboxes_) {
      if (sb->deleting) continue;
      if (filter.id && id != *filter.id) continue;
      if (filter.state && sb->info.state != *filter.state) continue;
      bool match = true;
      for (const auto& [k, v] : filter.metadata) {
        auto it = sb->info.spec.metadata.find(k);
        if (it == sb->info.spec.metadata.end() || it->second != v) match = false;
      }
      if (match) found.emplace_back(ParseRfc3339Millis(sb->info.created_at).value_or(0), sb->info);
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second.id) < std::tie(b.first, b.second.id);
  });
  std::vector<SandboxInfo> out;
  out.reserve(found.size());
  for (auto& [created, info] : found) out.push_back(std::move(info));
  return out;
}

Status SandboxManagerImpl::Delete(const std::string& id) {
  auto held = LockForChange(id);
  if (!held) return held.error();
  Sandbox* sb = held->sandbox.get();
  {
    std::lock_guard lock(mu_);
    sb->deleting = true;
    // The row says so before anything is freed: a crash in the middle is finished by Recover
    // (never mistaken for a stopped sandbox whose files are gone).
    store::SandboxRow row = RowOf(*sb);
    row.state = "deleting";
    if (auto saved = db_->Put(row); !saved) spdlog::warn("sandbox {}: {}", id, saved.error().message);
  }
  Status st = Teardown(id, sb->uid_base, sb->init);
  usage_history_.Forget(id);
  std::lock_guard lock(mu_);
  sandboxes_.erase(id);
  stats_.sandboxes_deleted_total++;
  stats_.sandboxes_running = static_cast<int64_t>(sandboxes_.size());
  return st;
}

Result<SandboxInfo> SandboxManagerImpl::SetTimeout(const std::string& id, int64_t timeout_s) {
  std::lock_guard lock(mu_);
  auto sb = FindLocked(id);
  if (!sb) return NoSandbox(id);
  ApplyLifetime(*sb, timeout_s);
  if (sb->info.state != "running") {  // the clock starts when it runs again
    sb->expires_ms = 0;
    sb->info.expires_at.reset();
  }
  BH_TRY(db_->Put(RowOf(*sb)));
  return sb->info;
}

Result<SandboxManagerImpl::LockedSandbox> SandboxManagerImpl::LockForChange(const std::string& id) {
  LockedSandbox held;
  {
    std::lock_guard lock(mu_);
    held.sandbox = FindLocked(id);
    if (!held.sandbox) return NoSandbox(id);
  }
  held.life = std::unique_lock(held.sandbox->lifecycle_mu);
  std::lock_guard lock(mu_);
  if (held.sandbox->deleting) return NoSandbox(id);
  return held;
}

Error WrongState(const std::string& id, const std::string& state, const std::string& what) {
  return MakeError(ErrorCode::kConflict, "sandbox " + id + " is " + state + ": " + what, "sandbox_not_running");
}

Status SandboxManagerImpl::FreezeLocked(Sandbox& sb, bool frozen) {
  const std::string& id = sb.info.id;
  if (!runtime_->Alive(sb.init)) {
    std::lock_guard lock(mu_);
    sb.info.state = "error";
    (void)db_->Put(RowOf(sb));
    return WrongState(id, "error", "its init is gone; POST .../start boots it again");
  }
  BH_TRY(runtime_->SetFrozen(HostName(id), frozen));
  std::lock_guard lock(mu_);
  sb.info.state = frozen ? "paused" : "running";
  if (frozen) {
    sb.expires_ms = 0;  // a paused sandbox does not expire; its clock restarts on resume
    sb.info.expires_at.reset();
  } else {
    ApplyLifetime(sb, sb.info.spec.timeout_s);
    sb.last_activity_ms = UnixMillis();
  }
  if (auto st = db_->Put(RowOf(sb)); !st) {
    spdlog::warn("sandbox {}: state {} not saved: {}", id, sb.info.state, st.error().message);
  }
  return {};
}

Result<SandboxInfo> SandboxManagerImpl::SetPaused(const std::string& id, bool paused) {
  auto held = LockForChange(id);
  if (!held) return held.error();
  Sandbox& sb = *held->sandbox;
  std::string state;
  {
    std::lock_guard lock(mu_);
    state = sb.info.state;
  }
  if (state == (paused ? "running" : "paused")) {
    BH_TRY(FreezeLocked(sb, paused));
  } else if (state != (paused ? "paused" : "running")) {
    return WrongState(id, state, paused ? "only a running sandbox can be paused"
                                        : "only a paused sandbox can be resumed (POST .../start boots a stopped one)");
  }
  std::lock_guard lock(mu_);
  return sb.info;
}

Result<SandboxInfo> SandboxManagerImpl::Stop(const std::string& id) {
  auto held = LockForChange(id);
  if (!held) return held.error();
  Sandbox& sb = *held->sandbox;
  {
    std::lock_guard lock(mu_);
    if (sb.info.state == "stopped") return sb.info;
    // The row says stopped before anything ends: a crash from here on recovers as stopped.
    sb.info.state = "stopped";
    sb.expires_ms = 0;
    sb.info.expires_at.reset();
    BH_TRY(db_->Put(RowOf(sb)));
  }
  network_->Detach(id);
  BH_TRY(runtime_->Destroy(HostName(id), sb.init));  // thaws a paused one first
  std::lock_guard lock(mu_);
  sb.init = {};
  sb.netns.reset();
  (void)db_->Put(RowOf(sb));
  return sb.info;
}

Result<SandboxInfo> SandboxManagerImpl::Start(const std::string& id) {
  auto held = LockForChange(id);
  if (!held) return held.error();
  Sandbox& sb = *held->sandbox;
  std::string state;
  {
    std::lock_guard lock(mu_);
    state = sb.info.state;
  }
  if (state == "running") {
    std::lock_guard lock(mu_);
    return sb.info;
  }
  if (state == "paused") {
    BH_TRY(FreezeLocked(sb, false));
    std::lock_guard lock(mu_);
    return sb.info;
  }
  // stopped, or error (its init died): boot it again on its files.
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  auto layer = storage_->GetLayer(id);
  if (!layer) return layer.error();
  network_->Detach(id);
  BH_TRY(runtime_->Destroy(HostName(id), sb.init));  // whatever an init that died left behind
  ScopeGuard undo([&] { (void)runtime_->Destroy(HostName(id), sb.init); sb.init = {}; sb.netns.reset(); });
  BH_TRY(Boot(sb, *layer));
  if (sb.info.spec.network.mode != "none") BH_TRY(network_->Apply(id, sb.netns.get(), sb.info.spec.network));
  std::lock_guard lock(mu_);
  sb.info.state = "running";
  ApplyLifetime(sb, sb.info.spec.timeout_s);
  sb.last_activity_ms = UnixMillis();
  if (auto st = db_->Put(RowOf(sb)); !st) {
    sb.info.state = state;
    return st.error();
  }
  undo.Dismiss();
  return sb.info;
}

std::shared_ptr<void> SandboxManagerImpl::BusyToken(const std::shared_ptr<Sandbox>& sb) {
  {
    std::lock_guard lock(mu_);
    sb->busy++;
  }
  return std::shared_ptr<void>(nullptr, [this, sb](void*) {
    std::lock_guard lock(mu_);
    sb->busy--;
    sb->last_activity_ms = UnixMillis();
  });
}

std::shared_ptr<OutputBudget> SandboxManagerImpl::OutputBudgetLocked(Sandbox& sb) {
  if (config_.output_rate_mib <= 0) return nullptr;
  if (!sb.output_budget) {
    const int64_t rate = config_.output_rate_mib * 1024 * 1024;
    // A second's worth at once, and at least one default-sized exec answer (16 MiB).
    sb.output_budget = std::make_shared<OutputBudget>(rate, std::max<int64_t>(rate, 16 * 1024 * 1024));
  }
  return sb.output_budget;
}

Result<std::shared_ptr<Sandbox>> SandboxManagerImpl::RunningSandbox(const std::string& id) {
  bool paused = false;
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return NoSandbox(id);
    sb->last_activity_ms = UnixMillis();
    paused = sb->info.state == "paused";
  }
  if (paused) {
    auto resumed = Resume(id);
    if (!resumed) return resumed.error();
  }
  std::lock_guard lock(mu_);
  auto sb = FindLocked(id);
  if (!sb) return NoSandbox(id);
  if (sb->info.state == "running" && !runtime_->Alive(sb->init)) {
    // Its init died under it (killed from outside, or a crash): nothing can run there now.
    spdlog::warn("sandbox {}: init {} is gone; marking it as error", id, sb->init.pid);
    sb->info.state = "error";
    (void)db_->Put(RowOf(*sb));
  }
  if (sb->info.state == "stopped") return WrongState(id, "stopped", "POST .../start boots it again");
  if (sb->info.state != "running")
    return MakeError(ErrorCode::kConflict, "sandbox " + id + " is " + sb->info.state, "sandbox_not_running");
  return sb;
}

Result<UniqueFd> SandboxManagerImpl::OpenLiveNetns(const InitProcess& init) {
  auto fd = net::OpenNetns(init.pid);
  if (!fd) return fd.error();
  if (!runtime_->Alive(init)) return MakeError(ErrorCode::kConflict, "the sandbox's init is gone");
  return fd;
}

Result<int> SandboxManagerImpl::NetnsOf(const Sandbox& sb) {
  if (!sb.netns) return MakeError(ErrorCode::kConflict, "sandbox " + sb.info.id + " has no network namespace");
  return sb.netns.get();
}

Result<UniqueFd> SandboxManagerImpl::SandboxSocket(const std::string& id, int domain) {
  auto sb = RunningSandbox(id);
  if (!sb) return sb.error();
  auto netns = NetnsOf(**sb);
  if (!netns) return netns.error();
  return net::SocketInNetns(*netns, domain, SOCK_STREAM);
}

Result<SandboxInfo> SandboxManagerImpl::SetNetwork(const std::string& id, const NetworkPolicy& policy) {
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (sb && sb->info.state == "stopped") {  // applies when it starts
      sb->info.spec.network = policy;
      BH_TRY(db_->Put(RowOf(*sb)));
      return sb->info;
    }
  }
  auto found = RunningSandbox(id);
  if (!found) return found.error();
  Sandbox& sb = **found;
  auto netns = NetnsOf(sb);
  if (!netns) return netns.error();
  std::lock_guard change(sb.network_mu);
  BH_TRY(network_->Apply(id, *netns, policy));
  std::lock_guard lock(mu_);
  sb.info.spec.network = policy;
  BH_TRY(db_->Put(RowOf(sb)));
  return sb.info;
}

Result<std::vector<net::EgressRecord>> SandboxManagerImpl::Egress(const std::string& id, int64_t limit) {
  {
    std::lock_guard lock(mu_);
    if (!FindLocked(id)) return NoSandbox(id);
  }
  return network_->Egress(id, limit);
}

boost::asio::awaitable<Result<std::unique_ptr<ExecSession>>> SandboxManagerImpl::StartExec(
    boost::asio::any_io_executor executor, const std::string& id, ExecRequest req) {
  Result<std::shared_ptr<Sandbox>> sb = RunningSandbox(id);
  if (!sb.ok()) co_return sb.error();
  SandboxSpec spec;
  std::shared_ptr<OutputBudget> budget;
  {
    std::lock_guard lock(mu_);
    stats_.execs_total++;
    spec = (*sb)->info.spec;
    budget = OutputBudgetLocked(**sb);
  }
  std::shared_ptr<void> busy = BusyToken(*sb);
  const std::string payload = InitExecPayload(req, spec).dump();
  Result<std::unique_ptr<ExecSession>> session =
      co_await ExecSession::Start(executor, CtlPath(id), payload, std::move(req.stdin_data));
  if (session.ok()) {
    (*session)->Hold(std::move(busy));
    (*session)->PaceWith(std::move(budget));
  }
  co_return session;
}

boost::asio::awaitable<Result<InitConnection>> SandboxManagerImpl::ConnectInit(boost::asio::any_io_executor executor,
                                                                               const std::string& id) {
  Result<std::shared_ptr<Sandbox>> sb = RunningSandbox(id);
  if (!sb.ok()) co_return sb.error();
  SandboxSpec spec;
  std::shared_ptr<OutputBudget> budget;
  {
    std::lock_guard lock(mu_);
    spec = (*sb)->info.spec;
    budget = OutputBudgetLocked(**sb);
  }
  std::shared_ptr<void> busy = BusyToken(*sb);
  Result<std::unique_ptr<CtlClient>> client = co_await CtlClient::Connect(executor, CtlPath(id));
  if (!client.ok()) co_return client.error();
  (*client)->PaceWith(std::move(budget));
  co_return InitConnection{std::move(client.value()), std::move(spec), std::move(busy)};
}

Status SandboxManagerImpl::DeleteImage(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, sb] : sandboxes_)
      if (sb->info.spec.image == name)
        return MakeError(ErrorCode::kConflict, "image " + name + " is used by sandbox " + id, "image_in_use");
  }
  return storage_->DeleteImage(name);
}

ManagerStats SandboxManagerImpl::Stats() {
  std::lock_guard lock(mu_);
  ManagerStats s = stats_;
  s.warm_pool_ready = static_cast<int64_t>(pool_.size() + snapshot_pool_.size());  // both kinds
  s.snapshots = static_cast<int64_t>(snapshots_.size());
  s.storage_driver = storage_->driver();
  return s;
}

void SandboxManagerImpl::PoolLoop() {
  SandboxSpec defaults;
  defaults.timeout_s = 0;
  while (!stopping_) {
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::seconds(1), [&] {
        return stopping_ || static_cast<int>(pool_.size()) < config_.warm_pool || !SnapshotToWarmLocked().empty();
      });
      if (stopping_) break;
      if (static_cast<int>(pool_.size()) >= config_.warm_pool) {
        std::string snapshot_id = SnapshotToWarmLocked();
        if (snapshot_id.empty()) continue;
        lock.unlock();
        RefillSnapshotPool(snapshot_id);
        continue;
      }
    }
    auto sb = Launch(defaults);
    if (sb) {
      (*sb)->info.state = "pooled";
      if (auto st = db_->Put(RowOf(**sb)); !st) {
        (void)Teardown((*sb)->info.id, (*sb)->uid_base, (*sb)->init);
        sb = st.error();
      }
    }
    if (!sb) {
      spdlog::warn("warm pool: {}", sb.error().message);
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::seconds(5), [&] { return stopping_.load(); });
      continue;
    }
    std::lock_guard lock(mu_);
    pool_.push_back(*sb);
  }
}

std::string SandboxManagerImpl::SnapshotToWarmLocked() const {
  for (const auto& id : warm_snapshots_) {
    if (!snapshot_pool_.count(id) && snapshots_.count(id)) return id;
  }
  return {};
}

void SandboxManagerImpl::RefillSnapshotPool(const std::string& snapshot_id) {
  auto use = UseSnapshot(snapshot_id, /*refill=*/true);  // not deleted under the launch
  if (!use) return;
  const LayerSource source{snapshot_id, use->first.uid_base};
  auto spec = SpecFromJson(use->first.spec_json);
  if (!spec) return;
  spec->from_snapshot = snapshot_id;
  spec->volumes.clear();
  spec->network = {};
  spec->sudo_users.clear();  // FitPooled grants the handout's
  spec->timeout_s = 0;
  auto sb = Launch(*spec, source);
  if (sb) {
    (*sb)->info.state = "pooled";
    if (auto st = db_->Put(RowOf(**sb)); !st) {
      (void)Teardown((*sb)->info.id, (*sb)->uid_base, (*sb)->init);
      sb = st.error();
    }
  }
  if (!sb) {
    spdlog::warn("warm pool of snapshot {}: {}", snapshot_id, sb.error().message);
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::seconds(5), [&] { return stopping_.load(); });
    return;
  }
  std::unique_lock lock(mu_);
  const bool still_warm = snapshots_.count(snapshot_id) &&
                          std::find(warm_snapshots_.begin(), warm_snapshots_.end(), snapshot_id) != warm_snapshots_.end();
  if (still_warm && !snapshot_pool_.count(snapshot_id)) {
    snapshot_pool_[snapshot_id] = *sb;
    return;
  }
  lock.unlock();
  (void)Teardown((*sb)->info.id, (*sb)->uid_base, (*sb)->init);
}

void SandboxManagerImpl::TimerLoop() {
  while (!stopping_) {
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping_.load(); });
    }
    if (stopping_) break;
    std::vector<std::string> expired, to_pause, to_stop;
    int64_t now = UnixMillis();
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, sb] : sandboxes_) {
        if (sb->deleting || sb->info.state != "running") continue;
        if (sb->expires_ms && sb->expires_ms <= now) {
          const std::string& action = sb->info.spec.on_timeout;
          (action == "pause" ? to_pause : action == "stop" ? to_stop : expired).push_back(id);
        } else if (sb->info.spec.idle_timeout_s > 0 && sb->busy == 0 &&
                   now - sb->last_activity_ms >= sb->info.spec.idle_timeout_s * 1000) {
          to_pause.push_back(id);
        }
      }
    }
    SampleUsage(now);
    for (const auto& id : expired) {
      spdlog::info("sandbox {} reached its timeout; deleting it", id);
      (void)Delete(id);
    }
    for (const auto& id : to_stop) {
      spdlog::info("sandbox {} reached its timeout; stopping it", id);
      if (auto stopped = Stop(id); !stopped) spdlog::warn("sandbox {}: stop: {}", id, stopped.error().message);
    }
    for (const auto& id : to_pause) {
      spdlog::info("sandbox {} reached its timeout or idle timeout; pausing it", id);
      if (auto paused = Pause(id); !paused) spdlog::warn("sandbox {}: pause: {}", id, paused.error().message);
    }
  }
}

void SandboxManagerImpl::SampleUsage(int64_t now) {
  struct Due {
    std::string id;
    double cpus = 0;
    int64_t started_ms = 0;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(mu_);
    std::vector<Sandbox*> waiting;
    for (const auto& [id, sb] : sandboxes_) {
      if (!sb->deleting && sb->info.state == "running" && sb->next_sample_ms <= now) waiting.push_back(sb.get());
    }
    const auto longest_waiting = [](const Sandbox* a, const Sandbox* b) { return a->next_sample_ms < b->next_sample_ms; };
    if (waiting.size() > kSamplesPerTick) {
      std::nth_element(waiting.begin(), waiting.begin() + kSamplesPerTick, waiting.end(), longest_waiting);
      waiting.resize(kSamplesPerTick);
    }
    for (Sandbox* sb : waiting) {
      sb->next_sample_ms = now + UsageHistory::kIntervalMs;
      due.push_back({sb->info.id, sb->info.spec.cpus, sb->booted_ms});
    }
  }
  for (const Due& d : due) RecordUsage(d.id, d.cpus, d.started_ms);
  if (now - usage_trimmed_ms_ >= UsageHistory::kIntervalMs) {
    usage_history_.Trim(now);
    usage_trimmed_ms_ = now;
  }
}

void SandboxManagerImpl::RecordUsage(const std::string& id, double cpus, int64_t started_ms) {
  auto usage = runtime_->Usage(HostName(id));
  if (!usage) return;  // deleted or stopped meanwhile
  const int64_t now = UnixMillis();
  usage->disk_bytes = SampledDiskBytes(id, now);
  usage_history_.Record(id, now, *usage, cpus, started_ms);
}

int64_t SandboxManagerImpl::SampledDiskBytes(const std::string& id, int64_t now) {
  // The quota drivers read the figure from the filesystem's accounting; without quotas it is
  // a walk of the whole layer, which the sampler repeats at most once a minute per sandbox.
  constexpr int64_t kWalkIntervalMs = 60'000;
  const bool walk = !storage_->quotas_enforced();
  if (walk) {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return 0;
    if (now - sb->disk_measured_ms < kWalkIntervalMs) return sb->disk_bytes;
  }
  auto disk = storage_->LayerUsageBytes(id);
  const int64_t bytes = disk ? *disk : 0;
  if (walk) {
    std::lock_guard lock(mu_);
    if (auto sb = FindLocked(id)) {
      sb->disk_bytes = bytes;
      sb->disk_measured_ms = now;
    }
  }
  return bytes;
}

Result<std::vector<UsageSample>> SandboxManagerImpl::UsageSamples(const std::string& id, int64_t from_ms,
                                                                  int64_t to_ms) {
  double cpus = 0;
  int64_t started_ms = 0;
  bool sample_now = false;
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return NoSandbox(id);
    const int64_t now = UnixMillis();
    // Due and its turn has not come (many running), or just made: what it uses now is wanted
    // too. (One the timer is sampling now is not due, but may have no sample yet.)
    if (sb->info.state == "running" && (sb->next_sample_ms <= now || usage_history_.LastSampleMs(id) == 0)) {
      sb->next_sample_ms = now + UsageHistory::kIntervalMs;
      cpus = sb->info.spec.cpus;
      started_ms = sb->booted_ms;
      sample_now = true;
    }
  }
  if (sample_now) RecordUsage(id, cpus, started_ms);
  return usage_history_.Between(id, from_ms, to_ms);
}

void SandboxManagerImpl::Shutdown() {
  std::call_once(shutdown_once_, [&] {
    stopping_ = true;
    wake_.notify_all();
    if (pool_thread_.joinable()) pool_thread_.join();
    if (timer_thread_.joinable()) timer_thread_.join();
    std::deque<std::shared_ptr<Sandbox>> pool;
    {
      std::lock_guard lock(mu_);
      pool.swap(pool_);
      for (auto& [id, sb] : snapshot_pool_) pool.push_back(sb);
      snapshot_pool_.clear();
    }
    for (const auto& sb : pool) (void)Teardown(sb->info.id, sb->uid_base, sb->init);
    runtime_->Release();
  });
}

// ---- snapshots and forks ---------------------------------------------------------------
//
// A snapshot's row is written "creating" before its files exist and "ready" once they are
// complete; a fork captures an unlisted snapshot of its own (left "creating") and starts
// every copy from it. A crash at any point leaves rows or files that RecoverSnapshots
// removes, so no snapshot is listed that cannot be used.

namespace {

Error NoSnapshot(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
}

SnapshotInfo SnapshotInfoOf(const store::SnapshotRow& row) {
  return SnapshotInfo{row.id, row.name, row.sandbox_id, row.created_at, row.size_bytes, row.image};
}

SnapshotEntry EntryOf(const store::SnapshotRow& row) {
  return SnapshotEntry{SnapshotInfoOf(row), row.uid_base, row.spec_json, 0};
}

}  // namespace

void SandboxManagerImpl::RecoverSnapshots() {
  auto rows = db_->LoadSnapshots();
  if (!rows) {
    spdlog::error("recover: snapshots: {}", rows.error().message);
    return;
  }
  std::set<std::string> ready;
  for (const auto& row : *rows) {
    struct stat st;
    bool complete = row.state == "ready" && ::stat((storage_->SnapshotDir(row.id) + "/upper").c_str(), &st) == 0;
    if (!complete) {
      spdlog::info("recover: removing unfinished snapshot {}", row.id);
      DropSnapshot(row.id);
      continue;
    }
    ready.insert(row.id);
    snapshots_[row.id] = EntryOf(row);
  }
  for (const auto& id : storage_->ListSnapshots()) {
    if (ready.count(id)) continue;
    spdlog::info("recover: removing snapshot files without a record: {}", id);
    (void)storage_->DestroySnapshot(id);
  }
}

Result<std::pair<SnapshotEntry, std::shared_ptr<void>>> SandboxManagerImpl::UseSnapshot(const std::string& id,
                                                                                       bool refill) {
  std::lock_guard lock(mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return NoSnapshot(id);
  it->second.users++;
  if (refill) it->second.refills++;
  std::shared_ptr<void> token(nullptr, [this, id, refill](void*) {
    {
      std::lock_guard lock(mu_);
      if (auto it = snapshots_.find(id); it != snapshots_.end()) {
        it->second.users--;
        if (refill) it->second.refills--;
      }
    }
    snapshot_released_.notify_all();
  });
  return std::pair{it->second, std::move(token)};
}

void SandboxManagerImpl::DropSnapshot(const std::string& id) {
  // Files first: a row without files is removed at the next start as well.
  if (auto st = storage_->DestroySnapshot(id); !st) spdlog::warn("snapshot {}: {}", id, st.error().message);
  if (auto st = db_->RemoveSnapshot(id); !st) spdlog::warn("snapshot {}: {}", id, st.error().message);
}

Result<store::SnapshotRow> SandboxManagerImpl::Capture(const std::string& sandbox_id, const std::string& name) {
  // No pause, resume, stop, start or delete meanwhile: the freeze below is ours alone.
  auto held = LockForChange(sandbox_id);
  if (!held) return held.error();
  Sandbox* sb = held->sandbox.get();
  store::SnapshotRow row;
  std::string state;
  {
    std::lock_guard lock(mu_);
    state = sb->info.state;
    // The settings without the preview token: it is this sandbox's alone, and snapshots are
    // exported.
    SandboxSpec settings = sb->info.spec;
    settings.preview.token.clear();
    row.spec_json = SpecToJson(settings);
    row.image = sb->info.spec.image;
    row.uid_base = sb->uid_base;
  }
  if (state != "running" && state != "paused" && state != "stopped")
    return MakeError(ErrorCode::kConflict, "sandbox " + sandbox_id + " is " + state, "sandbox_not_running");
  row.id = "snap_" + NewId();
  row.name = name;
  row.sandbox_id = sandbox_id;
  row.created_at = Rfc3339(static_cast<time_t>(UnixMillis() / 1000));
  row.state = "creating";
  BH_TRY(db_->PutSnapshot(row));
  ScopeGuard undo([&] { DropSnapshot(row.id); });
  // Frozen, nothing in the sandbox writes while the capture is cut: files are whole.
  const bool freeze = state == "running";
  if (freeze) BH_TRY(runtime_->SetFrozen(HostName(sandbox_id), true));
  Status captured = storage_->CaptureSnapshot(sandbox_id, row.id);
  if (freeze) {
    if (auto thawed = runtime_->SetFrozen(HostName(sandbox_id), false); !thawed) {
      spdlog::error("sandbox {}: thaw after snapshot: {}", sandbox_id, thawed.error().message);
      if (captured) captured = thawed.error();
    }
  }
  if (!captured) return captured.error();
  undo.Dismiss();
  return row;
}

Result<SnapshotInfo> SandboxManagerImpl::CreateSnapshot(const std::string& sandbox_id, const std::string& name) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  auto row = Capture(sandbox_id, name);
  if (!row) return row.error();
  ScopeGuard undo([&] { DropSnapshot(row->id); });
  if (auto size = storage_->SnapshotSizeBytes(row->id)) row->size_bytes = *size;
  row->state = "ready";
  BH_TRY(db_->PutSnapshot(*row));
  undo.Dismiss();
  std::lock_guard lock(mu_);
  snapshots_[row->id] = EntryOf(*row);
  return SnapshotInfoOf(*row);
}

std::vector<SnapshotInfo> SandboxManagerImpl::ListSnapshots() {
  std::vector<SnapshotInfo> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, entry] : snapshots_) out.push_back(entry.info);
  }
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.id < b.id;
  });
  return out;
}

Result<SnapshotInfo> SandboxManagerImpl::GetSnapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return NoSnapshot(id);
  return it->second.info;
}

Status SandboxManagerImpl::DeleteSnapshot(const std::string& id) {
  std::shared_ptr<Sandbox> pooled;
  {
    std::unique_lock lock(mu_);
    // Refused while a sandbox, a create or an export uses it. A warm-pool refill launching
    // from it is not the caller's doing: it is told to give up (the snapshot leaves the warm
    // list, so the refill tears down what it made) and waited for.
    auto in_use = [&]() -> std::optional<std::string> {
      auto it = snapshots_.find(id);
      if (it == snapshots_.end()) return std::nullopt;
      for (const auto& [sandbox_id, sb] : sandboxes_)
        if (sb->info.spec.from_snapshot == id) return "sandbox " + sandbox_id;
      if (it->second.users > it->second.refills) return "a sandbox being created from it, or an export";
      return std::string();
    };
    std::optional<std::string> user = in_use();
    if (!user) return NoSnapshot(id);
    if (user->empty() && snapshots_.at(id).refills > 0) {
      warm_snapshots_.erase(std::remove(warm_snapshots_.begin(), warm_snapshots_.end(), id), warm_snapshots_.end());
      snapshot_released_.wait_for(lock, std::chrono::seconds(30), [&] {
        auto it = snapshots_.find(id);
        return it == snapshots_.end() || it->second.refills == 0;
      });
      user = in_use();
      if (!user) return NoSnapshot(id);
      if (user->empty() && snapshots_.at(id).users > 0) user = "a warm-pool sandbox still being made from it";
    }
    if (!user->empty())
      return MakeError(ErrorCode::kConflict, "snapshot " + id + " is used by " + *user, "snapshot_in_use");
    auto it = snapshots_.find(id);
    snapshots_.erase(it);
    warm_snapshots_.erase(std::remove(warm_snapshots_.begin(), warm_snapshots_.end(), id), warm_snapshots_.end());
    if (auto ready = snapshot_pool_.find(id); ready != snapshot_pool_.end()) {
      pooled = ready->second;
      snapshot_pool_.erase(ready);
    }
  }
  if (pooled) (void)Teardown(pooled->info.id, pooled->uid_base, pooled->init);
  // The row goes first: files without a row are collected at the next start.
  BH_TRY(db_->RemoveSnapshot(id));
  if (auto st = storage_->DestroySnapshot(id); !st) spdlog::warn("snapshot {}: {}", id, st.error().message);
  return {};
}

Result<SandboxInfo> SandboxManagerImpl::CreateFromSnapshot(SandboxSpec spec) {
  const std::string snapshot_id = *spec.from_snapshot;
  // Held until Admit has listed the sandbox, which holds the snapshot from then on.
  auto use = UseSnapshot(snapshot_id);
  if (!use) return use.error();
  const LayerSource source{snapshot_id, use->first.uid_base};
  const std::string& image = use->first.info.image;
  if (spec.image.empty()) spec.image = image;
  if (spec.image != image)
    return MakeError(ErrorCode::kInvalid, "snapshot " + snapshot_id + " is of image \"" + image +
                                              "\": a sandbox started from it runs that image");
  std::shared_ptr<Sandbox> pooled, evicted;
  {
    std::lock_guard lock(mu_);
    if (static_cast<int64_t>(sandboxes_.size()) >= config_.max_sandboxes)
      return MakeError(ErrorCode::kTooMany, "sandbox limit reached (" + std::to_string(config_.max_sandboxes) + ")");
    if (config_.warm_pool > 0) {
      // Most recently used last; the pool keeps a ready sandbox for the last few.
      warm_snapshots_.erase(std::remove(warm_snapshots_.begin(), warm_snapshots_.end(), snapshot_id),
                            warm_snapshots_.end());
      warm_snapshots_.push_back(snapshot_id);
      while (warm_snapshots_.size() > kWarmSnapshots) {
        if (auto cold = snapshot_pool_.find(warm_snapshots_.front()); cold != snapshot_pool_.end()) {
          evicted = cold->second;
          snapshot_pool_.erase(cold);
        }
        warm_snapshots_.pop_front();
      }
    }
    if (auto ready = snapshot_pool_.find(snapshot_id);
        ready != snapshot_pool_.end() && spec.volumes.empty() && spec.runtime == "native") {
      pooled = ready->second;
      snapshot_pool_.erase(ready);
      stats_.warm_pool_hits_total++;
    }
  }
  wake_.notify_all();
  if (evicted) (void)Teardown(evicted->info.id, evicted->uid_base, evicted->init);
  if (pooled && FitPooled(*pooled, spec)) return Admit(pooled);
  auto sb = Launch(spec, source);
  if (!sb) {
    std::lock_guard lock(mu_);
    stats_.sandbox_create_failures_total++;
    return sb.error();
  }
  return Admit(*sb);
}

Result<SandboxInfo> SandboxManagerImpl::Admit(const std::shared_ptr<Sandbox>& sb) {
  const SandboxSpec& spec = sb->info.spec;
  sb->info.state = "running";
  if (spec.network.mode != "none") {
    if (auto st = network_->Apply(sb->info.id, sb->netns.get(), spec.network); !st) {
      (void)Teardown(sb->info.id, sb->uid_base, sb->init);
      return st.error();
    }
  }
  ApplyLifetime(*sb, spec.timeout_s);
  sb->last_activity_ms = UnixMillis();
  if (auto st = db_->Put(RowOf(*sb)); !st) {
    (void)Teardown(sb->info.id, sb->uid_base, sb->init);
    return st.error();
  }
  std::lock_guard lock(mu_);
  sandboxes_[sb->info.id] = sb;
  stats_.sandboxes_created_total++;
  stats_.sandboxes_running = static_cast<int64_t>(sandboxes_.size());
  return sb->info;
}

Result<std::vector<SandboxInfo>> SandboxManagerImpl::Fork(const std::string& sandbox_id, int count) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  {
    std::lock_guard lock(mu_);
    if (static_cast<int64_t>(sandboxes_.size()) + count > config_.max_sandboxes)
      return MakeError(ErrorCode::kTooMany, "sandbox limit reached (" + std::to_string(config_.max_sandboxes) + ")");
  }
  // One capture (one freeze) for all copies; it is never listed and goes when they exist.
  auto row = Capture(sandbox_id, "");
  if (!row) return row.error();
  ScopeGuard drop([&] { DropSnapshot(row->id); });
  auto spec = SpecFromJson(row->spec_json);
  if (!spec) return spec.error();
  spec->from_snapshot.reset();  // a fork's files come from its parent, not from a listed snapshot
  // The copies boot side by side: a fork of ten costs about one boot per core, not ten.
  std::vector<std::optional<Result<std::shared_ptr<Sandbox>>>> launched(static_cast<size_t>(count));
  {
    std::vector<std::thread> boots;
    for (size_t i = 0; i < launched.size(); ++i) {
      boots.emplace_back([&, i] { launched[i] = Launch(*spec, LayerSource{row->id, row->uid_base}); });
    }
    for (auto& boot : boots) boot.join();
  }
  std::vector<SandboxInfo> forks;
  std::optional<Error> failed;
  for (auto& sb : launched) {
    if (failed) {
      if (sb->ok()) (void)Teardown((**sb)->info.id, (**sb)->uid_base, (**sb)->init);
      continue;
    }
    if (!sb->ok()) {
      std::lock_guard lock(mu_);
      stats_.sandbox_create_failures_total++;
      failed = sb->error();
      continue;
    }
    auto info = Admit(**sb);  // on failure it has torn the sandbox down
    if (!info) {
      failed = info.error();
      continue;
    }
    forks.push_back(*info);
  }
  if (failed) {
    for (const auto& fork : forks) (void)Delete(fork.id);
    return *failed;
  }
  return forks;
}


Status SandboxManagerImpl::ExportSnapshot(const std::string& id, int out_fd) {
  auto use = UseSnapshot(id);  // not deleted while it is read
  if (!use) return use.error();
  const SnapshotEntry& entry = use->first;
  nlohmann::json metadata = {{"name", entry.info.name}, {"image", entry.info.image},
                             {"created_at", entry.info.created_at}, {"source_id", id},
                             {"spec", nlohmann::json::parse(entry.spec_json, nullptr, false)}};
  return storage::ExportSnapshotTree(storage_->SnapshotDir(id) + "/upper", entry.uid_base, metadata.dump(), out_fd);
}

namespace {

Error BadSnapshotArchive(const std::string& why) {
  return MakeError(ErrorCode::kInvalid, "not a bulkhead snapshot archive: " + why, "invalid_snapshot");
}

}  // namespace

Result<SnapshotInfo> SandboxManagerImpl::ImportSnapshot(int in_fd, int64_t max_bytes) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  store::SnapshotRow row;
  row.id = "snap_" + NewId();
  row.created_at = Rfc3339(static_cast<time_t>(UnixMillis() / 1000));
  row.image = "host";
  row.spec_json = SpecToJson(SandboxSpec{});
  // Owned by the stored range until a sandbox starts from it and gets them shifted to its own:
  // no account, no sandbox, never host root (a setuid file in an archive stays harmless).
  row.uid_base = kStoredIdBase;
  row.state = "creating";  // the row first: a crash from here on is cleaned up by Recover
  BH_TRY(db_->PutSnapshot(row));
  ScopeGuard undo([&] { DropSnapshot(row.id); });
  BH_TRY(storage_->MakeSnapshotDir(row.id));
  const std::string upper = storage_->SnapshotDir(row.id) + "/upper";
  auto metadata_text = storage::ImportSnapshotTree(in_fd, upper, row.uid_base, max_bytes);
  if (!metadata_text) return metadata_text.error();
  // (A symlink where a mount goes is refused when a sandbox boots from it: contain.cc.)

  nlohmann::json metadata = nlohmann::json::parse(*metadata_text, nullptr, false);
  if (!metadata.is_object() || !metadata.contains("image") || !metadata["image"].is_string() ||
      !metadata.contains("spec") || !metadata["spec"].is_object()) {
    return BadSnapshotArchive("its metadata lacks the image or the settings");
  }
  row.image = metadata["image"].get<std::string>();
  if (row.image != "host" && !storage_->ImageExists(row.image)) {
    return MakeError(ErrorCode::kInvalid, "the snapshot is of image \"" + row.image +
                                              "\", which this host does not have: import the image first",
                     "image_not_found");
  }
  auto spec = SpecFromJson(metadata["spec"].dump());
  if (!spec) return BadSnapshotArchive("its settings do not parse: " + spec.error().message);
  spec->image = row.image;
  spec->from_snapshot.reset();
  spec->volumes.clear();  // names of another host's volumes
  row.spec_json = SpecToJson(*spec);
  if (metadata.contains("name") && metadata["name"].is_string()) {
    row.name = metadata["name"].get<std::string>().substr(0, 128);
  }
  BH_TRY(storage_->SealSnapshot(row.id));
  if (auto size = storage_->SnapshotSizeBytes(row.id)) row.size_bytes = *size;
  row.state = "ready";
  BH_TRY(db_->PutSnapshot(row));
  undo.Dismiss();
  std::lock_guard lock(mu_);
  snapshots_[row.id] = EntryOf(row);
  return SnapshotInfoOf(row);
}

}  // namespace bulkhead::core
