#include "core/sandbox_manager.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <tuple>

#include "common/digest.h"
#include "common/time_format.h"
#include "core/manager_impl.h"
#include "core/state_dir.h"
#include "runtime/gvisor/gvisor_tier.h"
#include "runtime/microvm/microvm_tier.h"
#include "runtime/native/native_tier.h"

namespace bulkhead::core {
namespace fs = std::filesystem;

namespace {

std::string Fnv1aHex(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}

// One of bulkhead's own programs (bulkhead-init, bulkhead-sentry-prewarmer): next to this
// binary, else where a package installs it.
std::string HelperBinaryPath(const std::string& name) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& p : {self.parent_path() / name, fs::path("/usr/local/lib/bulkhead") / name,
                            fs::path("/usr/lib/bulkhead") / name})
    if (fs::exists(p, ec)) return p.string();
  return (self.parent_path() / name).string();
}

std::string InitBinaryPath() { return HelperBinaryPath("bulkhead-init"); }

// What every command in a sandbox with egress gets, so that programs that honour proxy
// settings use the explicit proxy (the rest is redirected to it anyway).
std::map<std::string, std::string> ProxyEnv(const std::string& host) {
  const std::string proxy = "http://" + host + ":" + std::to_string(net::kProxyPort);
  const std::string direct = "localhost,127.0.0.1,::1";
  return {{"HTTP_PROXY", proxy}, {"HTTPS_PROXY", proxy}, {"ALL_PROXY", proxy}, {"http_proxy", proxy},
          {"https_proxy", proxy}, {"all_proxy", proxy}, {"NO_PROXY", direct}, {"no_proxy", direct}};
}

}  // namespace

std::string HostName(const std::string& id) { return "sb-" + HexEncode(Sha256(id)).substr(0, 16); }

std::string NewId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char raw[20];
  (void)!::getrandom(raw, sizeof raw, 0);
  std::string id;
  for (unsigned char c : raw) id += kAlphabet[c % 36];
  return id;
}

Error NoSandbox(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, "no sandbox " + id, "sandbox_not_found");
}

Error WrongState(const std::string& id, std::string_view state, std::string_view what) {
  return MakeError(ErrorCode::kConflict, "sandbox " + id + " is " + std::string(state) + ": " + std::string(what),
                   "sandbox_not_running");
}

ctl::ExecMessage InitExecPayload(const ExecRequest& request, const SandboxSpec& spec, const std::string& proxy_host) {
  std::map<std::string, std::string> env;
  if (spec.network.mode != "none") env = ProxyEnv(proxy_host);
  for (const auto& [k, v] : spec.env) env[k] = v;
  for (const auto& [k, v] : request.env) env[k] = v;
  ctl::ExecMessage m;
  m.argv = request.argv;
  for (const auto& [k, v] : env) m.env.push_back(k + "=" + v);
  m.cwd = request.cwd.value_or(spec.workdir);
  m.user = request.user.value_or(spec.user);
  m.timeout_ms = static_cast<uint64_t>(request.timeout_s) * 1000;
  m.stdin_enabled = request.stdin_data.has_value();
  if (request.output_limit) m.output_limit = *request.output_limit;
  m.nofile = runtime::DescriptorLimit(spec.memory_mb * 1024 * 1024);
  return m;
}

Result<std::unique_ptr<SandboxManager>> SandboxManager::Open(const DaemonConfig& config) {
  const std::string tag = Fnv1aHex(fs::weakly_canonical(config.state_dir).string());
  auto native = runtime::native::NativeTier::Create(tag, InitBinaryPath());
  if (!native) return native.error();
  TierSet tiers;
  tiers.Add(std::move(*native));
  // gvisor where runsc is installed and runs here; otherwise create answers why not.
  auto runsc = runtime::gvisor::FindRunsc(config.runsc);
  auto gvisor = runsc ? runtime::gvisor::GvisorTier::Create(tag, config.state_dir, InitBinaryPath(),
                                                                 HelperBinaryPath("bulkhead-sentry-prewarmer"), *runsc)
                      : Result<std::unique_ptr<runtime::gvisor::GvisorTier>>(runsc.error());
  if (gvisor) {
    spdlog::info("gvisor runtime: {} ({}, {})", runsc->path, runsc->version, runsc->origin);
    tiers.Add(std::move(*gvisor));
  } else {
    spdlog::warn("gvisor runtime unavailable: {}", gvisor.error().message);
    tiers.Lack("gvisor", gvisor.error().message);
  }
  // microvm where QEMU, the guest kernel and the device daemons are installed.
  auto installed = runtime::microvm::FindInstalled();
  auto microvm = installed ? runtime::microvm::MicrovmTier::Create(tag, config.state_dir, InitBinaryPath(), *installed,
                                                                     config.microvm_templates,
                                                                     config.microvm_memory_snapshots)
                           : Result<std::unique_ptr<runtime::microvm::MicrovmTier>>(installed.error());
  if (microvm) {
    spdlog::info("microvm runtime: {}, guest kernel {}", installed->qemu_version, installed->kernel_version);
    tiers.Add(std::move(*microvm));
  } else {
    spdlog::warn("microvm runtime unavailable: {}", microvm.error().message);
    tiers.Lack("microvm", microvm.error().message);
  }
  return Open(config, std::move(tiers));
}

Result<std::unique_ptr<SandboxManager>> SandboxManager::Open(const DaemonConfig& config, TierSet tiers) {
  if (auto tier = tiers.Find(config.default_runtime); !tier)
    return MakeError(ErrorCode::kInvalid, "--default-runtime: " + tier.error().message);
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
  if (!(*storage)->quotas_enforced()) spdlog::warn("disk quotas are not enforced on this host");

  auto network = NetworkController::Start(config, **db);
  if (!network) return network.error();
  auto mgr = std::make_unique<SandboxManagerImpl>(config, std::move(lock), std::move(*db), std::move(*network),
                                                  std::move(*storage), std::move(tiers), std::move(*host));
  BH_TRY(mgr->LoadQuotas());
  BH_TRY(mgr->Recover());
  mgr->StartBackground();
  return std::unique_ptr<SandboxManager>(std::move(mgr));
}

SandboxManagerImpl::SandboxManagerImpl(DaemonConfig config, UniqueFd lock, std::unique_ptr<store::StateDb> db,
                                       std::unique_ptr<NetworkController> network,
                                       std::unique_ptr<storage::Storage> storage, TierSet tiers,
                                       std::string host_rootfs)
    : config_(std::move(config)),
      lock_(std::move(lock)),
      db_(std::move(db)),
      network_(std::move(network)),
      storage_(std::move(storage)),
      tiers_(std::move(tiers)),
      uids_(config_.state_dir),
      host_rootfs_(std::move(host_rootfs)) {
  for (runtime::Tier* tier : tiers_.All())
    tier->SetReclaim([this](const std::string& host_name) { return ReclaimMemory(host_name); });
  // The pools of plain sandboxes of the host image (config.h: some from their first create);
  // snapshots get pools as creates use them.
  for (runtime::Tier* tier : tiers_.All()) {
    if (tier->capabilities().pooling && config_.WarmPool(tier->name()) > 0 && config_.WarmPoolAtStart(tier->name()))
      (void)pools_.SetTarget({tier->name(), "host", ""}, config_.WarmPool(tier->name()));
  }
}

void SandboxManagerImpl::StartBackground() {
  bool pooling = false;
  for (runtime::Tier* tier : tiers_.All()) pooling = pooling || config_.WarmPool(tier->name()) > 0;
  if (pooling || !config_.image_warm_pools.empty()) pool_thread_ = std::thread([this] { PoolLoop(); });
  if (!config_.image_warm_pools.empty()) image_pools_thread_ = std::thread([this] { PrepareImagePools(); });
  timer_thread_ = std::thread([this] { TimerLoop(); });
}

Status SandboxManagerImpl::RoomForLocked(int64_t more) const {
  if (static_cast<int64_t>(sandboxes_.size()) + more <= config_.max_sandboxes) return {};
  return MakeError(ErrorCode::kTooMany, "sandbox limit reached (" + std::to_string(config_.max_sandboxes) +
                                            ", the daemon's --max-sandboxes)");
}

Result<SandboxInfo> SandboxManagerImpl::Create(const SandboxSpec& asked) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  SandboxSpec spec = asked;
  spec.network = WithTenantDeny(std::move(spec.network), TenantEgressOf(spec.tenant));
  if (spec.from_snapshot) return CreateFromSnapshot(spec);
  BH_TRY(tiers_.Find(spec.runtime));
  // (A tenant's sandbox runs the host's images and its tenant's own, whoever names them.)
  if (!storage_->ImageVisible(spec.image, spec.tenant))
    return MakeError(ErrorCode::kNotFound, "no image named " + spec.image, "image_not_found");
  std::shared_ptr<void> claim;  // the tenant's quota, until Admit has listed the sandbox
  {
    std::lock_guard lock(mu_);
    auto claimed = ClaimCreatesLocked(spec, 1);
    if (!claimed) return claimed.error();
    claim = *claimed;
  }
  if (auto sb = TakePooled(spec); sb && FitPooled(*sb, spec)) return Admit(sb);
  auto launched = Launch(spec);
  if (!launched) {
    std::lock_guard lock(mu_);
    stats_.sandbox_create_failures_total++;
    return launched.error();
  }
  return Admit(*launched);
}

Result<SandboxInfo> SandboxManagerImpl::Get(const std::string& id) {
  SandboxInfo info;
  runtime::Tier* tier = nullptr;
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return NoSandbox(id);
    info = InfoOf(*sb);  // (reading it is not activity: a dashboard must not keep it awake)
    tier = sb->tier;
  }
  SandboxUsage usage;
  if (info.state == StateName(State::kRunning)) {
    if (auto u = tier->SandboxUsage(HostName(id))) usage = *u;
  }
  if (info.state != StateName(State::kStopped)) info.runtime_details = tier->SandboxDetails(HostName(id));
  if (auto d = storage_->LayerUsageBytes(id)) usage.disk_bytes = *d;
  info.usage = usage;
  return info;
}

std::optional<std::string> SandboxManagerImpl::TenantOf(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return std::nullopt;
  return it->second->info.spec.tenant;
}

std::vector<SandboxInfo> SandboxManagerImpl::List(const ListFilter& filter) {
  // Keyed by created_at as a time (the rows of older versions have whole seconds), so that
  // they sort as they were made; ties (only such older rows) by id.
  std::vector<std::pair<int64_t, SandboxInfo>> found;
  {
    std::lock_guard lock(mu_);
    auto consider = [&](const std::shared_ptr<Sandbox>& sb) {
      if (sb->deleting) return;
      if (filter.state && StateName(sb->state) != *filter.state) return;
      if (filter.tenant && sb->info.spec.tenant != *filter.tenant) return;
      bool match = true;
      for (const auto& [k, v] : filter.metadata) {
        auto it = sb->info.spec.metadata.find(k);
        if (it == sb->info.spec.metadata.end() || it->second != v) match = false;
      }
      if (match) found.emplace_back(ParseRfc3339Millis(sb->info.created_at).value_or(0), InfoOf(*sb));
    };
    if (filter.id) {
      if (auto it = sandboxes_.find(*filter.id); it != sandboxes_.end()) consider(it->second);
    } else {
      for (const auto& [id, sb] : sandboxes_) consider(sb);
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
    (void)MoveTo(*sb, State::kDeleting);
    if (auto saved = db_->Put(RowOf(*sb)); !saved) spdlog::warn("sandbox {}: {}", id, saved.error().message);
  }
  Status st = Teardown(*sb);
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
  if (sb->state != State::kRunning) {  // the clock starts when it runs again
    sb->expires_ms = 0;
    sb->info.expires_at.reset();
  }
  BH_TRY(db_->Put(RowOf(*sb)));
  return InfoOf(*sb);
}

Result<ImageInfo> SandboxManagerImpl::FindImage(const std::string& name, const std::string& tenant) {
  auto stored = storage_->ResolveImage(name, config_.registry.default_registry, tenant);
  if (!stored.ok()) return stored.error();
  auto image = storage_->GetImage(*stored);
  if (!image.ok()) return image.error();
  return storage::ImageSeenBy(std::move(*image), tenant);
}

Status SandboxManagerImpl::DeleteImage(const std::string& name, const std::string& tenant) {
  auto stored = storage_->ResolveImage(name, config_.registry.default_registry, tenant);
  if (!stored.ok()) return stored.error();
  auto image = storage_->GetImage(*stored);
  if (!image.ok()) return image.error();
  if (!storage::HoldsImage(*image, tenant))
    return MakeError(ErrorCode::kForbidden,
                     "image " + name + " is the host's: a tenant runs it but only the host's key deletes it",
                     "image_not_owned");
  // A reference (a registry's, or a build's name) comes off its image; the image goes with its
  // last one (as `docker rmi`). A digest names the image itself.
  if (*stored != name) {
    const std::vector<std::string>& refs = tenant.empty() ? image->references : image->tenants[tenant];
    auto ref = storage::ParseImageRef(name, config_.registry.default_registry);
    const bool as_given = std::find(refs.begin(), refs.end(), name) != refs.end();
    const std::string reference = !as_given && ref.ok() && ref->digest.empty() ? ref->ToString() : name;
    if (refs.size() > 1 && std::find(refs.begin(), refs.end(), reference) != refs.end()) {
      auto left = storage_->UnnameImage(*stored, reference, tenant);
      if (!left.ok()) return left.error();
      RetargetImagePools();
      return {};
    }
  }
  // Held by others too: this tenant (or the host) only lets go of it.
  const bool others = tenant.empty() ? !image->tenants.empty() : image->shared || image->tenants.size() > 1;
  if (others) {
    auto held = storage_->ReleaseImage(*stored, tenant);
    if (!held.ok()) return held.error();
    RecountImages();
    RetargetImagePools();
    if (*held) return {};
  }
  std::vector<std::shared_ptr<Sandbox>> pooled;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, sb] : sandboxes_)
      if (sb->info.spec.image == *stored)
        return MakeError(ErrorCode::kConflict, "image " + name + " is used by sandbox " + id, "image_in_use");
    pooled = ColdImageLocked(*stored);  // (its warm pool's sandboxes are nobody's yet)
  }
  for (const auto& sb : pooled) (void)Teardown(*sb);
  BH_TRY(storage_->DeleteImage(*stored));
  RecountImages();
  RetargetImagePools();
  if (auto gc = CollectImageGarbage(); !gc.ok()) spdlog::warn("image blobs: {}", gc.error().message);
  return {};
}

Result<storage::PushResult> SandboxManagerImpl::PushImage(const storage::PushRequest& request,
                                                          const storage::PullListener& listener) {
  auto stored = storage_->ResolveImage(request.image, config_.registry.default_registry, request.tenant);
  if (!stored.ok()) return stored.error();
  storage::PushRequest resolved = request;
  resolved.image = *stored;
  return puller_.Push(resolved, listener);
}

Result<std::optional<int64_t>> SandboxManagerImpl::CollectImageGarbage() {
  int64_t freed = 0;
  auto done = puller_.CollectGarbage(&freed);
  if (!done.ok()) return done.error();
  if (!*done) return std::optional<int64_t>();
  if (freed > 0) spdlog::info("image blobs: {} bytes no image uses removed", freed);
  return std::optional<int64_t>(freed);
}

ManagerStats SandboxManagerImpl::Stats() {
  std::lock_guard lock(mu_);
  ManagerStats s = stats_;
  s.warm_pool_ready = pools_.Ready();
  s.snapshots = static_cast<int64_t>(snapshots_.size());
  s.storage_driver = storage_->driver();
  return s;
}

void SandboxManagerImpl::Shutdown() {
  std::call_once(shutdown_once_, [&] {
    stopping_ = true;
    puller_.CancelAll();
    if (image_pools_thread_.joinable()) image_pools_thread_.join();
    for (runtime::Tier* tier : tiers_.All()) tier->SetReclaim(nullptr);
    wake_.notify_all();
    if (pool_thread_.joinable()) pool_thread_.join();
    if (timer_thread_.joinable()) timer_thread_.join();
    std::vector<std::shared_ptr<Sandbox>> pooled;
    {
      std::lock_guard lock(mu_);
      pooled = pools_.Drain();
    }
    for (const auto& sb : pooled) (void)Teardown(*sb);
    for (runtime::Tier* tier : tiers_.All()) tier->Release();
  });
}

}  // namespace bulkhead::core
