// Launching, booting and tearing down sandboxes, and their lifecycle calls (lifecycle.h).
#include <sys/stat.h>

#include <filesystem>
#include <spdlog/spdlog.h>

#include "common/ctl_messages.h"
#include "common/ctl_protocol.h"
#include "common/id_ranges.h"
#include "common/random_hex.h"
#include "common/scope_guard.h"
#include "common/time_format.h"
#include "core/manager_impl.h"
#include "core/spec_json.h"

namespace bulkhead::core {
namespace fs = std::filesystem;

// Preview tokens are as long as the API key: 32 random bytes, 64 hex digits.
constexpr size_t kPreviewTokenBytes = 32;

Status IssuePreviewToken(PreviewAccess& preview) {
  preview.token.clear();
  if (preview.is_public) return {};
  auto token = RandomHex(kPreviewTokenBytes);
  if (!token) return token.error();
  preview.token = std::move(*token);
  return {};
}

Status SandboxManagerImpl::MoveTo(Sandbox& sb, State to) {
  if (!CanMove(sb.state, to)) {
    spdlog::error("sandbox {}: no move from {} to {}", sb.info.id, StateName(sb.state), StateName(to));
    return MakeError(ErrorCode::kInternal, "sandbox " + sb.info.id + " cannot go from " +
                                               std::string(StateName(sb.state)) + " to " + std::string(StateName(to)));
  }
  sb.state = to;
  return {};
}

SandboxInfo InfoOf(const Sandbox& sb) {
  SandboxInfo info = sb.info;
  info.state = StateName(sb.state);
  info.paused_to_disk = sb.on_disk;
  return info;
}

store::SandboxRow SandboxManagerImpl::RowOf(const Sandbox& sb) const {
  store::SandboxRow r;
  r.id = sb.info.id;
  r.state = StateName(sb.state);
  r.spec_json = SpecToJson(sb.info.spec);
  r.created_at = sb.info.created_at;
  r.expires_at_ms = sb.expires_ms;
  r.uid_base = sb.uid_base;
  r.init_pid = sb.handle.pid;
  r.init_start_time = sb.handle.start_time;
  r.on_disk = sb.on_disk;
  return r;
}

Status NetworkModeOffered(const runtime::Tier& tier, const NetworkPolicy& policy) {
  if (policy.mode == "none" || tier.capabilities().network_egress) return {};
  return MakeError(ErrorCode::kInvalid,
                   "the " + tier.name() + " runtime runs network mode none only (its sandboxes have their own "
                   "loopback and no way out yet): network mode " + policy.mode + " needs the native or gvisor runtime",
                   "runtime_unsupported");
}

std::shared_ptr<Sandbox> SandboxManagerImpl::FindLocked(const std::string& id) const {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second->deleting) return nullptr;
  return it->second;
}

Result<std::shared_ptr<Sandbox>> SandboxManagerImpl::Launch(const SandboxSpec& spec, const LayerSource& source,
                                                            bool background) {
  auto tier = tiers_.Find(spec.runtime);
  if (!tier) return tier.error();
  if (!spec.volumes.empty() && !(*tier)->capabilities().idmapped_volumes)
    return MakeError(ErrorCode::kInvalid, "the " + spec.runtime + " runtime has no named volumes", "runtime_unsupported");
  BH_TRY(NetworkModeOffered(**tier, spec.network));
  auto sb = std::make_shared<Sandbox>();
  sb->tier = *tier;
  sb->info.id = NewId();
  sb->info.spec = spec;
  BH_TRY(IssuePreviewToken(sb->info.spec.preview));
  sb->info.parent_snapshot = spec.from_snapshot;
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
  ScopeGuard undo([&] { (void)Teardown(*sb); });

  auto layer = source.snapshot_id.empty()
                   ? storage_->CreateLayer(id, sb->uid_base, sb->uid_base, spec.disk_mb)
                   : storage_->CreateLayerFromSnapshot(
                         id, source.snapshot_id, {source.uid_base, sb->uid_base, kIdCount}, spec.disk_mb);
  if (!layer) return layer.error();
  BH_TRY(Boot(*sb, *layer, background, source.memory_image));
  undo.Dismiss();
  return sb;
}

Status SandboxManagerImpl::Boot(Sandbox& sb, const storage::WritableLayer& layer, bool background,
                                const std::string& memory_image) {
  const SandboxSpec& spec = sb.info.spec;
  runtime::LaunchSpec ls;
  ls.id = HostName(sb.info.id);
  if (spec.image == "host") {
    ls.rootfs.image = host_rootfs_;
  } else {
    auto image = storage_->ImageRootfs(spec.image);
    if (!image) return image.error();
    ls.rootfs.image = *image;
  }
  if (storage_->ImageUsesHostDirs(spec.image)) {
    ls.rootfs.host_binds = storage_->HostBindDirs();
    if (spec.image != "host") ls.rootfs.host_image = host_rootfs_;
  }
  ls.rootfs.upper = layer.upper;
  ls.rootfs.work = layer.work;
  ls.staging = SandboxDir(sb.info.id);
  if (::mkdir(ls.staging.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + ls.staging, errno);
  ls.host_uid = sb.uid_base;
  ls.limits = LimitsOf(spec);
  auto volume_binds = volumes_.Acquire(sb.info.id, spec.tenant, spec.volumes);  // marks them in use (again)
  if (!volume_binds) return volume_binds.error();
  ls.volumes = std::move(*volume_binds);
  ls.background = background;
  ls.network = spec.network.mode != "none";
  ls.memory_image = memory_image;
  auto handle = sb.tier->Launch(ls);
  if (!handle) return handle.error();
  {
    std::lock_guard lock(mu_);  // readers of a running sandbox's init hold it
    sb.handle = *handle;
    sb.init = sb.tier->Dialer(ls.staging);
  }
  sb.booted_ms = UnixMillis();
  // An image was taken frozen, and a tier that freezes inside has the workload still stopped
  // there (the host's freeze ended with the old sandbox).
  if (!memory_image.empty() && sb.tier->capabilities().freeze_inside) BH_TRY(FreezeInside(sb, false));
  auto network = sb.tier->AttachNetwork(sb.handle);
  if (!network) return network.error();
  sb.netns = std::move(network->netns);
  return GrantSudo(sb, spec);
}

bool SandboxManagerImpl::ReclaimMemory(const std::string& host_name) {
  std::shared_ptr<const runtime::InitDialer> init;
  std::string id;
  {
    std::lock_guard lock(mu_);
    for (const auto& [sandbox_id, sb] : sandboxes_) {
      if (HostName(sandbox_id) == host_name) init = sb->init, id = sandbox_id;
    }
    // A pooled one has no row in sandboxes_ yet: it runs nothing to kill either.
  }
  if (!init) return false;
  constexpr std::chrono::seconds kInitAnswer{10};
  auto answer = CallInitBlocking(*init, ctl::kReclaim, "", kInitAnswer, ctl::kResult);
  if (!answer) {
    spdlog::warn("sandbox {}: out of memory, and its init did not reclaim: {}", id, answer.error().message);
    return false;
  }
  auto reclaimed = ctl::DecodeReclaimed(answer->payload);
  if (!reclaimed || !reclaimed->killed) return false;
  spdlog::info("sandbox {}: out of memory: killed process {} ({} MiB resident)", id, *reclaimed->killed,
               reclaimed->resident_bytes >> 20);
  return true;
}

Status SandboxManagerImpl::SetLimitsInside(const Sandbox& sb, const runtime::Limits& limits) const {
  if (!sb.tier->capabilities().limits_in_sandbox) return {};
  constexpr std::chrono::seconds kInitAnswer{10};
  auto answer = CallInitBlocking(*sb.init, ctl::kLimits, ctl::Encode(sb.tier->LimitsInsideFor(limits)), kInitAnswer,
                                 ctl::kResult);
  if (!answer) return answer.error();
  return {};
}

Status SandboxManagerImpl::SetFrozen(const Sandbox& sb, bool frozen) const {
  const std::string host_name = HostName(sb.info.id);
  if (!sb.tier->capabilities().freeze_inside) return sb.tier->SetFrozen(host_name, frozen);
  if (!frozen) {
    BH_TRY(sb.tier->SetFrozen(host_name, false));
    return FreezeInside(sb, false);
  }
  // An init that does not answer still gets frozen from outside: a pause must not hang on it
  // (what it costs: a write caught half-sent, as without this step).
  if (auto inside = FreezeInside(sb, true); !inside)
    spdlog::warn("sandbox {}: its init did not stop the workload: {}", sb.info.id, inside.error().message);
  if (auto outside = sb.tier->SetFrozen(host_name, true); !outside) {
    (void)FreezeInside(sb, false);
    return outside;
  }
  return {};
}

Status SandboxManagerImpl::FreezeInside(const Sandbox& sb, bool frozen) const {
  if (!sb.init) return MakeError(ErrorCode::kInternal, "no init to reach");
  constexpr std::chrono::seconds kInitAnswer{5};  // init waits at most 1 s for the workload
  ctl::FreezeMessage message{frozen};
  if (!frozen) {
    // The guest's clock stood still while it was held (or is a memory image's), and a restored
    // guest's random state is its image's: both are given anew.
    message.realtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
    auto entropy = RandomHex(32);
    if (!entropy) return entropy.error();
    message.entropy = *entropy;
  }
  auto answer = CallInitBlocking(*sb.init, ctl::kFreeze, ctl::Encode(message), kInitAnswer, ctl::kResult);
  if (!answer) return answer.error();
  auto frozen_answer = ctl::DecodeFrozen(answer->payload);
  if (!frozen_answer) return frozen_answer.error();
  if (frozen && !frozen_answer->settled)
    spdlog::warn("sandbox {}: a process was still in a system call a second after the freeze", sb.info.id);
  return {};
}

Status SandboxManagerImpl::GrantSudo(const Sandbox& sb, const SandboxSpec& spec) const {
  if (spec.sudo_users.empty()) return {};
  constexpr std::chrono::seconds kInitAnswer{10};  // a fresh init answers at once; a stuck one must not hold a create
  auto answer = CallInitBlocking(*sb.init, ctl::kSudoUsers, nlohmann::json{{"users", spec.sudo_users}}.dump(),
                                 kInitAnswer, ctl::kResult);
  if (!answer) return answer.error();
  return {};
}

Status SandboxManagerImpl::Teardown(const std::string& id, runtime::Tier& tier, uid_t uid_base,
                                    const runtime::SandboxHandle& handle) {
  Status first;
  auto note = [&](Status st) {
    if (!st && first) first = st;
  };
  network_->Forget(id);
  note(tier.Destroy(HostName(id), handle));
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

Result<SandboxInfo> SandboxManagerImpl::Admit(const std::shared_ptr<Sandbox>& sb) {
  const SandboxSpec& spec = sb->info.spec;
  if (auto st = MoveTo(*sb, State::kRunning); !st) {
    (void)Teardown(*sb);
    return st.error();
  }
  if (spec.network.mode != "none") {
    if (auto st = network_->Apply(sb->info.id, sb->netns.get(), spec.network); !st) {
      (void)Teardown(*sb);
      return st.error();
    }
  }
  ApplyLifetime(*sb, spec.timeout_s);
  sb->last_activity_ms = UnixMillis();
  if (auto st = db_->Put(RowOf(*sb)); !st) {
    (void)Teardown(*sb);
    return st.error();
  }
  std::lock_guard lock(mu_);
  sandboxes_[sb->info.id] = sb;
  stats_.sandboxes_created_total++;
  stats_.sandboxes_running = static_cast<int64_t>(sandboxes_.size());
  return InfoOf(*sb);
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

Result<SandboxInfo> SandboxManagerImpl::Change(const std::string& id, Call call) {
  auto held = LockForChange(id);
  if (!held) return held.error();
  Sandbox& sb = *held->sandbox;
  State state;
  {
    std::lock_guard lock(mu_);
    state = sb.state;
  }
  const Plan plan = PlanFor(call, state, sb.on_disk);
  switch (plan.step) {
    case Step::kNothing:
      break;
    case Step::kFreeze:
    case Step::kThaw:
      BH_TRY(FreezeLocked(sb, plan.step == Step::kFreeze));
      break;
    case Step::kEnd:
      BH_TRY(EndLocked(sb));
      break;
    case Step::kBoot: {
      std::shared_ptr<void> claim;  // its tenant's quota of running sandboxes, until it runs
      {
        std::lock_guard lock(mu_);
        auto claimed = ClaimLocked(sb.info.spec.tenant, NeedOf(sb.info.spec, 1, false));
        if (!claimed) return claimed.error();
        claim = *claimed;
      }
      BH_TRY(BootAgainLocked(sb));
      break;
    }
    case Step::kHibernate:
      BH_TRY(HibernateLocked(sb));
      break;
    case Step::kCapture:
    case Step::kRefuse:
      return WrongState(id, StateName(state), plan.why);
  }
  std::lock_guard lock(mu_);
  return InfoOf(sb);
}

Status SandboxManagerImpl::RequireAlive(Sandbox& sb) {
  if (sb.tier->Alive(sb.handle)) return {};
  std::lock_guard lock(mu_);
  (void)MoveTo(sb, State::kError);
  (void)db_->Put(RowOf(sb));
  return WrongState(sb.info.id, "error", "its init is gone; POST .../start boots it again");
}

Status SandboxManagerImpl::FreezeLocked(Sandbox& sb, bool frozen) {
  const std::string& id = sb.info.id;
  if (frozen && !sb.tier->capabilities().pause)
    return MakeError(ErrorCode::kInvalid, "the " + sb.tier->name() + " runtime cannot pause a sandbox",
                     "runtime_unsupported");
  BH_TRY(RequireAlive(sb));
  BH_TRY(SetFrozen(sb, frozen));
  std::lock_guard lock(mu_);
  BH_TRY(MoveTo(sb, frozen ? State::kPaused : State::kRunning));
  if (frozen) {
    sb.expires_ms = 0;  // a paused sandbox does not expire; its clock restarts on resume
    sb.info.expires_at.reset();
  } else {
    ApplyLifetime(sb, sb.info.spec.timeout_s);
    sb.last_activity_ms = UnixMillis();
  }
  if (auto st = db_->Put(RowOf(sb)); !st) {
    spdlog::warn("sandbox {}: state {} not saved: {}", id, StateName(sb.state), st.error().message);
  }
  return {};
}

Status SandboxManagerImpl::EndLocked(Sandbox& sb) {
  const std::string& id = sb.info.id;
  {
    std::lock_guard lock(mu_);
    // The row says stopped before anything ends: a crash from here on recovers as stopped.
    BH_TRY(MoveTo(sb, State::kStopped));
    sb.expires_ms = 0;
    sb.info.expires_at.reset();
    sb.on_disk = false;  // a memory image goes with the processes it held
    BH_TRY(db_->Put(RowOf(sb)));
  }
  std::error_code ec;
  fs::remove_all(MemoryImageDir(id), ec);
  network_->Detach(id);
  BH_TRY(sb.tier->Destroy(HostName(id), sb.handle));  // thaws a paused one first
  ForgetProcesses(sb, /*save=*/true);
  return {};
}

void SandboxManagerImpl::ForgetProcesses(Sandbox& sb, bool save) {
  std::lock_guard lock(mu_);
  sb.handle = {};
  sb.init.reset();
  sb.netns.reset();
  if (save) (void)db_->Put(RowOf(sb));
}

Status SandboxManagerImpl::BootAgainLocked(Sandbox& sb) {
  const std::string& id = sb.info.id;
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  auto layer = storage_->GetLayer(id);
  if (!layer) return layer.error();
  network_->Detach(id);
  BH_TRY(sb.tier->Destroy(HostName(id), sb.handle));  // whatever an init that died left behind
  ScopeGuard undo([&] {
    (void)sb.tier->Destroy(HostName(id), sb.handle);
    ForgetProcesses(sb, /*save=*/false);
  });
  // Paused to disk, it resumes its processes from its memory image; else it boots.
  const bool restore = sb.on_disk;
  if (auto booted = Boot(sb, *layer, false, restore ? MemoryImageDir(id) : ""); !booted) {
    if (!restore) return booted.error();
    return MakeError(booted.error().code, "sandbox " + id + " could not be restored from disk: " +
                                              booted.error().message +
                                              " (POST .../stop drops its memory; start then boots it on its files)");
  }
  if (sb.info.spec.network.mode != "none") BH_TRY(network_->Apply(id, sb.netns.get(), sb.info.spec.network));
  {
    std::lock_guard lock(mu_);
    const State before = sb.state;
    BH_TRY(MoveTo(sb, State::kRunning));
    sb.on_disk = false;
    ApplyLifetime(sb, sb.info.spec.timeout_s);
    sb.last_activity_ms = UnixMillis();
    if (auto st = db_->Put(RowOf(sb)); !st) {
      (void)MoveTo(sb, before);
      sb.on_disk = restore;
      return st.error();
    }
  }
  undo.Dismiss();
  if (restore) {
    std::error_code ec;
    fs::remove_all(MemoryImageDir(id), ec);
  }
  return {};
}

Status SandboxManagerImpl::HibernateLocked(Sandbox& sb) {
  const std::string& id = sb.info.id;
  if (!sb.tier->capabilities().memory_snapshot)
    return MakeError(ErrorCode::kInvalid,
                     "the " + sb.tier->name() + " runtime cannot pause a sandbox to disk (" +
                         (tiers_.WithMemorySnapshots().empty() ? "no runtime on this host can"
                                                             : tiers_.WithMemorySnapshots() + " can") +
                         "; POST .../pause keeps its memory in RAM, POST .../stop keeps its files)",
                     "runtime_unsupported");
  BH_TRY(RequireAlive(sb));
  const std::string image = MemoryImageDir(id);
  std::error_code ec;
  fs::remove_all(image, ec);
  if (::mkdir(image.c_str(), 0700) != 0) return SystemError("mkdir " + image, errno);
  ScopeGuard drop_image([&] { fs::remove_all(image, ec); });
  const bool was_running = sb.state == State::kRunning;
  if (was_running) BH_TRY(SetFrozen(sb, true));
  if (auto saved = sb.tier->Checkpoint(HostName(id), sb.handle, image); !saved) {
    if (was_running) (void)SetFrozen(sb, false);
    return saved.error();
  }
  // The row says paused to disk before the processes end: a crash from here on recovers it
  // so, and its image is complete.
  Status saved;
  {
    std::lock_guard lock(mu_);
    const State before = sb.state;
    (void)MoveTo(sb, State::kPaused);  // from running or paused: always a move the table has
    sb.on_disk = true;
    saved = db_->Put(RowOf(sb));
    if (saved) {
      sb.expires_ms = 0;
      sb.info.expires_at.reset();
    } else {
      sb.on_disk = false;
      (void)MoveTo(sb, before);
    }
  }
  if (!saved) {  // (thawed outside mu_: it waits on the tier)
    if (was_running) (void)SetFrozen(sb, false);
    return saved.error();
  }
  drop_image.Dismiss();
  network_->Detach(id);
  if (auto ended = sb.tier->Destroy(HostName(id), sb.handle); !ended)
    spdlog::warn("sandbox {}: paused to disk, but its processes did not end: {}", id, ended.error().message);
  ForgetProcesses(sb, /*save=*/true);
  return {};
}

Result<std::shared_ptr<Sandbox>> SandboxManagerImpl::RunningSandbox(const std::string& id) {
  bool paused = false;
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (!sb) return NoSandbox(id);
    sb->last_activity_ms = UnixMillis();
    paused = sb->state == State::kPaused;
  }
  if (paused) {
    auto resumed = Resume(id);
    if (!resumed) return resumed.error();
  }
  std::lock_guard lock(mu_);
  auto sb = FindLocked(id);
  if (!sb) return NoSandbox(id);
  if (sb->state == State::kRunning && !sb->tier->Alive(sb->handle)) {
    // Its init died under it (killed from outside, or a crash): nothing can run there now.
    spdlog::warn("sandbox {}: init {} is gone; marking it as error", id, sb->handle.pid);
    (void)MoveTo(*sb, State::kError);
    (void)db_->Put(RowOf(*sb));
  }
  if (sb->state == State::kStopped) return WrongState(id, "stopped", "POST .../start boots it again");
  if (sb->state != State::kRunning)
    return WrongState(id, StateName(sb->state), "not running");
  return sb;
}

}  // namespace bulkhead::core
