// The manager's insides, shared by the files that implement it, one concern each:
//   sandbox_manager.cc  opening the daemon's state, and the calls that read or list
//   sandbox_lifecycle.cc launch, boot, teardown, pause/resume/stop/start, running checks
//   recovery.cc         re-attaching after a restart, and cleaning up after a crash
//   pool_refill.cc      the warm pools' refill thread
//   timers.cc           timeouts, idle pauses and usage sampling
//   snapshots.cc        snapshots, forks, export and import
//   sandbox_access.cc   exec, init connections, sockets and network policy of a sandbox
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/time_format.h"
#include "core/lifecycle.h"
#include "core/network_controller.h"
#include "core/sandbox_manager.h"
#include "core/tier_set.h"
#include "core/volume_registry.h"
#include "core/warm_pool.h"
#include "runtime/tier.h"
#include "runtime/uid_ranges.h"
#include "storage/storage.h"
#include "store/state_db.h"

namespace bulkhead::core {

// The name of a sandbox's objects on the host that any local user can list (its cgroups, the
// directory of its control socket, seen in /proc/net/unix): derived from the id but never the
// id itself, which is a capability (preview host names need nothing else).
std::string HostName(const std::string& id);
// 20 characters of [a-z0-9]: unguessable (~103 bits) and short enough for socket paths.
std::string NewId();
Error NoSandbox(const std::string& id);
// The limits a tier enforces of a spec.
inline runtime::Limits LimitsOf(const SandboxSpec& spec) { return {spec.cpus, spec.memory_mb, spec.pids}; }
struct Sandbox;
// The sandbox as the API shows it: its info with its state.
SandboxInfo InfoOf(const Sandbox& sb);
// A new sandbox's preview access: a private one gets a token of its own, never the one of
// the spec it was copied from (a fork's parent, a snapshot's sandbox).
Status IssuePreviewToken(PreviewAccess& preview);
Error WrongState(const std::string& id, std::string_view state, std::string_view what);
// Whether `tier` can run a sandbox with this network policy (Capabilities::network_egress):
// 422 runtime_unsupported if not.
Status NetworkModeOffered(const runtime::Tier& tier, const NetworkPolicy& policy);

// What a create (`create`) or a boot of `count` sandboxes with `spec` adds to its tenant's
// usage (quotas.cc).
Amounts NeedOf(const SandboxSpec& spec, int64_t count, bool create);

// A sandbox as the manager tracks it in memory.
struct Sandbox {
  SandboxInfo info;  // without its state (InfoOf adds it)
  State state = State::kStarting;
  runtime::Tier* tier = nullptr;
  uid_t uid_base = 0;
  runtime::SandboxHandle handle;                 // empty while no init runs
  std::shared_ptr<const runtime::InitDialer> init;  // the way to its init, while it runs
  int64_t expires_ms = 0;  // unix milliseconds; 0 = never (and while paused or stopped)
  bool deleting = false;
  int64_t last_activity_ms = 0;  // the last API call that needed it (idle_timeout_s)
  int64_t booted_ms = 0;         // when its init last started (unix ms)
  int64_t next_sample_ms = 0;    // when its usage is to be sampled next (usage_history_)
  int64_t disk_bytes = 0;        // SampledDiskBytes' last walk of its layer, and when
  int64_t disk_measured_ms = 0;
  int busy = 0;                  // API sessions using it now (never idle-paused meanwhile)
  // Paused to disk: no process runs; its memory image is in MemoryImageDir (lifecycle.h).
  bool on_disk = false;
  std::mutex lifecycle_mu;       // one pause/resume/stop/start/delete at a time
  // The sandbox's network namespace, opened while its init is known alive (no pid reuse).
  UniqueFd netns;
  std::mutex network_mu;  // one network change at a time
  std::shared_ptr<OutputBudget> output_budget;  // made at its first exec or attach; null = no cap
};

// Where a new sandbox's files come from: nothing (an empty workspace) or a snapshot, and with
// a memory snapshot its processes too.
struct LayerSource {
  std::string snapshot_id;
  uid_t uid_base = 0;  // the range the snapshot's owners are in
  std::string memory_image;  // the snapshot's memory image (storage::MemoryDir), or ""
};

// A ready snapshot as the manager tracks it in memory.
struct SnapshotEntry {
  SnapshotInfo info;
  uid_t uid_base = 0;
  std::string spec_json;  // the settings of the sandbox it was taken of
  std::string memory;     // its memory image's format (Tier::MemoryFormat); "" = files only
  int users = 0;          // creates, pool refills and exports reading it now (UseSnapshot)
  int refills = 0;        // of those, warm-pool refills: a delete waits for them instead of refusing
};

class SandboxManagerImpl : public SandboxManager {
 public:
  SandboxManagerImpl(DaemonConfig config, UniqueFd lock, std::unique_ptr<store::StateDb> db,
                     std::unique_ptr<NetworkController> network, std::unique_ptr<storage::Storage> storage,
                     TierSet tiers, std::string host_rootfs);
  ~SandboxManagerImpl() override { Shutdown(); }

  Status Recover();
  Status LoadQuotas();  // and the tenants' egress rules, and what their images hold
  void StartBackground();

  Result<SandboxInfo> Create(const SandboxSpec& spec) override;
  Result<SandboxInfo> Get(const std::string& id) override;
  Result<std::vector<UsageSample>> UsageSamples(const std::string& id, int64_t from_ms, int64_t to_ms) override;
  std::vector<SandboxInfo> List(const ListFilter& filter) override;
  std::optional<std::string> TenantOf(const std::string& id) override;
  Status Delete(const std::string& id) override;
  Result<SandboxInfo> SetTimeout(const std::string& id, int64_t timeout_s) override;
  Result<SandboxInfo> Pause(const std::string& id) override { return Change(id, Call::kPause); }
  Result<SandboxInfo> Resume(const std::string& id) override { return Change(id, Call::kResume); }
  Result<SandboxInfo> Stop(const std::string& id) override { return Change(id, Call::kStop); }
  Result<SandboxInfo> Start(const std::string& id) override { return Change(id, Call::kStart); }
  Result<SandboxInfo> PauseToDisk(const std::string& id) override { return Change(id, Call::kHibernate); }
  Result<UniqueFd> SandboxSocket(const std::string& id, int domain) override;
  Result<bool> PortsThroughInit(const std::string& id) override;
  Result<SandboxInfo> SetNetwork(const std::string& id, const NetworkPolicy& asked) override;
  Result<std::vector<net::EgressRecord>> Egress(const std::string& id, int64_t limit) override;
  void AddDaemonListener(const net::DaemonListener& listener) override { network_->AddDaemonListener(listener); }
  boost::asio::awaitable<Result<std::unique_ptr<ExecSession>>> StartExec(boost::asio::any_io_executor executor,
                                                                         const std::string& id,
                                                                         ExecRequest request) override;
  boost::asio::awaitable<Result<InitConnection>> ConnectInit(boost::asio::any_io_executor executor,
                                                             const std::string& id) override;
  std::vector<ImageInfo> ListImages() override { return storage_->ListImages(); }
  Result<ImageInfo> ImportImage(const std::string& name, const std::string& tar_path,
                                const std::string& tenant) override;
  Status DeleteImage(const std::string& name, const std::string& tenant) override;
  Result<ImageInfo> FindImage(const std::string& name, const std::string& tenant) override;
  Result<ImageInfo> PullImage(const storage::PullRequest& request, const storage::PullListener& listener) override;
  Result<storage::PushResult> PushImage(const storage::PushRequest& request,
                                        const storage::PullListener& listener) override;
  Result<std::optional<int64_t>> CollectImageGarbage() override;
  Result<ImageInfo> StoreBuiltImage(const storage::BuiltImage& image, const std::string& tar_path,
                                    const std::string& name, const std::string& tenant) override;
  void StopImagePulls() override { puller_.CancelAll(); }
  Result<VolumeInfo> CreateVolume(const storage::VolumeKey& key, int64_t size_mb) override;
  Result<VolumeInfo> GetVolume(const storage::VolumeKey& key) override { return volumes_.Get(key); }
  std::vector<VolumeInfo> ListVolumes() override { return volumes_.List(); }
  Status DeleteVolume(const storage::VolumeKey& key) override { return volumes_.Delete(key); }
  ManagerStats Stats() override;
  Status SetQuota(const std::string& tenant, const TenantQuota& quota) override;
  TenantQuota Quota(const std::string& tenant) override;
  Status SetTenantEgress(const std::string& tenant, const TenantEgress& egress) override;
  TenantEgress TenantEgressOf(const std::string& tenant) override;
  std::map<std::string, Amounts> UsageByTenant() override;
  std::vector<RuntimeInfo> Runtimes() const override { return tiers_.Describe(); }
  const DaemonConfig& config() const override { return config_; }
  void Shutdown() override;
  Result<SnapshotInfo> CreateSnapshot(const std::string& sandbox_id, const std::string& name, bool memory) override;
  std::vector<SnapshotInfo> ListSnapshots() override;
  Result<SnapshotInfo> GetSnapshot(const std::string& id) override;
  Status DeleteSnapshot(const std::string& id) override;
  Result<std::vector<SandboxInfo>> Fork(const std::string& sandbox_id, int count, bool memory) override;
  Status ExportSnapshot(const std::string& id, int out_fd) override;
  Result<SnapshotInfo> ImportSnapshot(int in_fd, int64_t max_bytes, bool memory) override;

 private:
  // ---- sandbox_lifecycle.cc
  // Moves the sandbox to `to` (lifecycle.h's table); an illegal move is a bug, refused.
  Status MoveTo(Sandbox& sb, State to);
  // Makes a running sandbox. Its row stays "starting" until the caller sets the state it
  // hands the sandbox out in and writes the row (once): a crash before that is cleaned up.
  // A `background` one boots for a warm pool: it yields the CPU until handed out (FitPooled).
  Result<std::shared_ptr<Sandbox>> Launch(const SandboxSpec& spec, const LayerSource& source = {},
                                          bool background = false);
  // Starts the sandbox's init on its writable layer, or resumes it from a memory image
  // (runtime::LaunchSpec::memory_image): sets its handle, init and netns.
  Status Boot(Sandbox& sb, const storage::WritableLayer& layer, bool background = false,
              const std::string& memory_image = "");
  // Tells a booted sandbox's init who may use its sudo (ctl::kSudoUsers); nothing to do without
  // sudo users (init boots with none).
  Status GrantSudo(const Sandbox& sb, const SandboxSpec& spec) const;
  // Where the sandbox's own kernel enforces its limits (Capabilities::limits_in_sandbox), tells
  // its init (ctl::kLimits); nothing to do elsewhere.
  Status SetLimitsInside(const Sandbox& sb, const runtime::Limits& limits) const;
  // Freezes or thaws every process of the sandbox. Where its tier says so
  // (Capabilities::freeze_inside), init stops the workload inside before the host's freeze and
  // resumes it after the host's thaw (ctl::kFreeze).
  Status SetFrozen(const Sandbox& sb, bool frozen) const;
  // kTooMany unless `more` sandboxes fit under --max-sandboxes. mu_ held.
  Status RoomForLocked(int64_t more) const;
  Status FreezeInside(const Sandbox& sb, bool frozen) const;
  // The sandbox with this host name ran out of memory (Tier::SetReclaim): has its init kill its
  // largest process. True if one was killed.
  bool ReclaimMemory(const std::string& host_name);
  // Frees everything a sandbox may hold; each step tolerates the resource being absent.
  Status Teardown(const std::string& id, runtime::Tier& tier, uid_t uid_base, const runtime::SandboxHandle& handle);
  Status Teardown(const Sandbox& sb) { return Teardown(sb.info.id, *sb.tier, sb.uid_base, sb.handle); }
  // Hands out a launched sandbox: network, lifetime, row, listing (what Create does last).
  Result<SandboxInfo> Admit(const std::shared_ptr<Sandbox>& sb);
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
  // Pause, resume, stop and start, as lifecycle.h plans them.
  Result<SandboxInfo> Change(const std::string& id, Call call);
  // With the sandbox's lifecycle lock held: freeze or thaw; end its processes; boot it again
  // (or restore it, paused to disk).
  Status FreezeLocked(Sandbox& sb, bool frozen);
  Status EndLocked(Sandbox& sb);
  Status BootAgainLocked(Sandbox& sb);
  // What the daemon held of a sandbox's processes once they ended (or a boot failed): its
  // handle, the way to its init, its network namespace; with `save`, its row says so.
  void ForgetProcesses(Sandbox& sb, bool save);
  // Pause to disk: the tier writes the memory image, then the processes end (state paused,
  // on_disk). BootAgainLocked restores them from it (state running), and the image goes.
  Status HibernateLocked(Sandbox& sb);
  // OK while the sandbox's init runs; else it is marked "error" and the answer is 409.
  Status RequireAlive(Sandbox& sb);
  // Where a sandbox paused to disk keeps its memory image (in its own directory).
  std::string MemoryImageDir(const std::string& id) const { return SandboxDir(id) + "/memory"; }
  // The running sandbox with this id, resumed first if paused; 404 if unknown, 409 if not
  // running (an init found dead marks it "error"). Counts as API activity.
  Result<std::shared_ptr<Sandbox>> RunningSandbox(const std::string& id);
  void ApplyLifetime(Sandbox& sb, int64_t timeout_s);
  // The created_at of a sandbox made now: the time to the millisecond, and later than that of
  // every sandbox made before it (a millisecond past the last when the clock has not moved on
  // or went back), so that created_at orders sandboxes as they were made.
  std::string NextCreatedAt();
  store::SandboxRow RowOf(const Sandbox& sb) const;
  // The live (not being deleted) sandbox with this id, or nullptr. Caller holds mu_.
  std::shared_ptr<Sandbox> FindLocked(const std::string& id) const;
  std::string SandboxDir(const std::string& id) const { return config_.state_dir + "/sandboxes/" + HostName(id); }

  // ---- pool_refill.cc
  // The pool a create with this spec takes from (pooled sandboxes start with network mode none
  // and no sudo users; Create gives them the requested ones), or nullopt: volumes are attached
  // at launch, and a tier may not pool.
  std::optional<PoolKey> PoolKeyFor(const SandboxSpec& spec) const;
  // The pool of a memory snapshot's restores, for `boot` (the snapshot's settings, as
  // CreateFromSnapshot launches them), if it may have one: its sandboxes wait frozen.
  std::optional<PoolKey> MemoryPoolKey(const SandboxSpec& boot) const;
  // A ready sandbox for this spec, or of this pool, if it has one (counted as a hit or a miss).
  std::shared_ptr<Sandbox> TakePooled(const SandboxSpec& spec);
  std::shared_ptr<Sandbox> TakePooled(const PoolKey& key);
  // Gives a sandbox launched with other settings (a warm pool's, a memory snapshot's) this
  // request's: limits, disk cap and spec. Its error (the sandbox torn down) if that fails.
  Status FitPooled(Sandbox& sb, const SandboxSpec& spec);
  // A snapshot pool a create just used: it keeps a ready sandbox while it is among the last
  // kWarmSnapshots used. Answers the sandboxes of pools that went cold, to tear down. Caller
  // holds mu_.
  std::vector<std::shared_ptr<Sandbox>> WarmSnapshotLocked(const PoolKey& key);
  // The snapshot is going: its pools too. Answers their sandboxes, to tear down. Caller holds mu_.
  std::vector<std::shared_ptr<Sandbox>> ColdSnapshotLocked(const std::string& snapshot_id);
  void PoolLoop();

  // ---- image_pools.cc
  // The pools of --warm-pool IMAGE=N: each configured image pulled if it is a registry
  // reference not stored yet (the daemon serves meanwhile), then its pool filled.
  void PrepareImagePools();
  // Points each configured image pool at the image its name resolves to now (after a pull,
  // an import, a delete): the pools of images no longer named go, their sandboxes torn down.
  void RetargetImagePools();
  // The image is going: its pools too. Answers their sandboxes, to tear down. Caller holds mu_.
  std::vector<std::shared_ptr<Sandbox>> ColdImageLocked(const std::string& image);
  // Launches one sandbox for the pool `key` and adds it (or tears it down if no longer wanted).
  void Refill(const PoolKey& key);

  // ---- timers.cc
  void TimerLoop();
  // Samples the usage of the running sandboxes whose turn it is, the longest waiting first and
  // at most kSamplesPerTick of them: with many running, each is sampled less often, and the
  // host's cost stays bounded.
  void SampleUsage(int64_t now);
  // One sample of a sandbox into usage_history_ (nothing if it is gone meanwhile).
  void RecordUsage(const std::string& id, runtime::Tier& tier, double cpus, int64_t started_ms);
  int64_t SampledDiskBytes(const std::string& id, int64_t now);
  static constexpr size_t kSamplesPerTick = 50;  // 200 a second at the timer's 250 ms

  // ---- snapshots.cc
  void RecoverSnapshots();
  // Writes a "creating" row, captures the sandbox's files (frozen if running) and with
  // `memory` its tier's memory image, thaws.
  Result<store::SnapshotRow> Capture(const std::string& sandbox_id, const std::string& name, bool memory);
  void DropSnapshot(const std::string& id);
  // A copy of a ready snapshot's entry, and a token that keeps DeleteSnapshot away (409) while
  // it lives; a warm-pool `refill` only delays it. 404 if there is none.
  Result<std::pair<SnapshotEntry, std::shared_ptr<void>>> UseSnapshot(const std::string& id, bool refill = false);
  Result<SandboxInfo> CreateFromSnapshot(SandboxSpec spec);
  // A memory snapshot's settings, checked to be restorable here: the runtime it was taken on
  // (`runtime`, when a create names one, must be it) with the same memory image format.
  Result<SandboxSpec> RestorableSpec(const SnapshotEntry& entry, const std::string& runtime) const;
  // Whether an imported archive's memory image (its metadata as exported) is one this host
  // restores: its tier here writes the same format, and it uses no volumes.
  Status AcceptMemoryImage(const std::string& metadata_json) const;

  // ---- quotas.cc
  // What the tenant holds now, with what calls still making theirs have claimed. mu_ held.
  Amounts UsageLocked(const std::string& tenant, int64_t now);
  // The tenant's creates of the last minute, after dropping older ones. mu_ held.
  size_t CreatesLastMinuteLocked(const std::string& tenant, int64_t now);
  // Claims `need` for the tenant: 429 "quota_exceeded" if it would pass a quota of the
  // tenant's. The claim lasts while the token lives (release it with mu_ not held); the host
  // admin's ("" tenant) claims nothing. mu_ held.
  Result<std::shared_ptr<void>> ClaimLocked(const std::string& tenant, const Amounts& need);
  // A create of `count` sandboxes like `spec`: room under --max-sandboxes, then its tenant's
  // claim (ClaimLocked). mu_ held.
  Result<std::shared_ptr<void>> ClaimCreatesLocked(const SandboxSpec& spec, int64_t count);
  // The images each tenant holds, counted again from the image store (after any change to it).
  void RecountImages();
  // The images the tenant holds now, by name, with their sizes.
  std::map<std::string, int64_t> ImagesHeldBy(const std::string& tenant);
  // After a call that stored an image as the tenant's: 429 "quota_exceeded" if its images now
  // pass its "images" or "image_bytes" quota, the ones it did not hold `before` let go again.
  Status KeepImagesWithinQuota(const std::string& tenant, const std::map<std::string, int64_t>& before);

  // ---- sandbox_access.cc
  // What a request to a running sandbox's init needs, taken together: its settings, its output
  // budget, the way to its init, and a busy token. 404/409 as RunningSandbox.
  struct InitAccess {
    SandboxSpec spec;
    std::shared_ptr<OutputBudget> budget;
    std::shared_ptr<const runtime::InitDialer> init;
    std::shared_ptr<void> busy;
    std::string proxy_host;
  };
  Result<InitAccess> AccessInit(const std::string& id);
  // A token that keeps the sandbox counted as busy while it lives.
  std::shared_ptr<void> BusyToken(const std::shared_ptr<Sandbox>& sb);
  // The sandbox's output relay budget (output_budget.h), made on first use; null if uncapped.
  std::shared_ptr<OutputBudget> OutputBudgetLocked(Sandbox& sb);
  // Its network namespace, or 409 (only a sandbox whose namespace could not be reopened after
  // a daemon restart lacks one).
  static Result<int> NetnsOf(const Sandbox& sb);

  DaemonConfig config_;
  UniqueFd lock_;
  std::unique_ptr<store::StateDb> db_;
  std::unique_ptr<NetworkController> network_;  // writes to db_
  std::unique_ptr<storage::Storage> storage_;
  TierSet tiers_;
  VolumeRegistry volumes_{*db_, *storage_};
  storage::ImagePuller puller_{*storage_, config_.registry};
  runtime::UidRanges uids_;
  std::mutex uids_mu_;
  std::string host_rootfs_;

  std::mutex mu_;  // guards sandboxes_, snapshots_, pools_, warm_snapshots_, stats_ and the quotas'
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::map<std::string, SnapshotEntry> snapshots_;  // ready ones
  WarmPool<std::shared_ptr<Sandbox>> pools_;
  // The snapshot pools that keep a ready sandbox: the last kWarmSnapshots that creates used,
  // most recent last. Only where the snapshot's runtime pools (DaemonConfig::WarmPool).
  static constexpr size_t kWarmSnapshots = 4;
  std::deque<PoolKey> warm_snapshots_;
  ManagerStats stats_;
  std::map<std::string, TenantQuota> quotas_;  // by tenant
  std::map<std::string, TenantEgress> egress_rules_;  // by tenant
  // By tenant: the images it holds, by name, and their sizes (RecountImages).
  std::map<std::string, std::map<std::string, int64_t>> tenant_images_;
  std::mutex recount_mu_;  // one RecountImages at a time, so an older count never lands last
  struct QuotaClaim {
    std::string tenant;
    Amounts need;
  };
  std::list<QuotaClaim> claims_;                        // ClaimLocked's, until released
  std::map<std::string, std::deque<int64_t>> creates_;  // by tenant: its creates of the last minute (ms)
  std::mutex quota_write_mu_;                           // one SetQuota at a time

  UsageHistory usage_history_;
  int64_t usage_trimmed_ms_ = 0;  // timer thread only
  int64_t egress_pruned_ms_ = 0;  // timer thread only: the last --egress-keep-days prune (the first at start)
  static constexpr int64_t kEgressPruneEveryMs = 3600 * 1000;
  std::atomic<int64_t> last_created_ms_{0};  // NextCreatedAt's last, and Recover's newest row
  std::atomic<bool> stopping_{false};
  std::condition_variable wake_;
  std::condition_variable snapshot_released_;  // a UseSnapshot token ended
  std::thread pool_thread_, timer_thread_, image_pools_thread_;
  std::mutex image_pools_mu_;                   // held by RetargetImagePools throughout
  std::set<PoolKey> image_pool_keys_;           // the pools it set; under mu_
  std::once_flag shutdown_once_;
};

}  // namespace bulkhead::core
