// Snapshots and forks of a sandbox's files, and with memory of its processes too, and their
// export and import.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>

#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "common/time_format.h"
#include "core/manager_impl.h"
#include "core/spec_json.h"
#include "storage/snapshot_archive.h"

namespace bulkhead::core {

// A snapshot's row is written "creating" before its files exist and "ready" once they are
// complete; a fork captures an unlisted snapshot of its own (left "creating") and starts
// every copy from it. A crash at any point leaves rows or files that RecoverSnapshots
// removes, so no snapshot is listed that cannot be used.

namespace {

Error NoSnapshot(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
}

// A memory snapshot or fork asked of a sandbox whose tier takes none: 422 naming those that do.
Error NoMemorySnapshots(const runtime::Tier& tier, const TierSet& tiers) {
  const std::string those = tiers.WithMemorySnapshots();
  return MakeError(ErrorCode::kInvalid,
                   "the " + tier.name() + " runtime takes no memory snapshots (\"memory\": false keeps the files): " +
                       (those.empty() ? std::string("no runtime on this host does")
                                      : "a sandbox of the " + those + " runtime can"),
                   "runtime_unsupported");
}

SnapshotInfo SnapshotInfoOf(const store::SnapshotRow& row) {
  auto spec = SpecFromJson(row.spec_json);
  return SnapshotInfo{row.id,
                      row.name,
                      row.sandbox_id,
                      row.created_at,
                      row.size_bytes,
                      row.image,
                      !row.memory.empty(),
                      spec ? spec->runtime : "native",
                      spec ? spec->tenant : ""};
}

SnapshotEntry EntryOf(const store::SnapshotRow& row) {
  return SnapshotEntry{SnapshotInfoOf(row), row.uid_base, row.spec_json, row.memory};
}

// Hard links in `to` (an empty directory) of the files of `from`: a memory image shared by a
// sandbox paused to disk and a snapshot of it, read only by either.
Status LinkFiles(const std::string& from, const std::string& to) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(from, ec)) {
    const std::string target = to + "/" + entry.path().filename().string();
    if (::link(entry.path().c_str(), target.c_str()) != 0) return SystemError("link " + target, errno);
  }
  if (ec) return SystemError("list " + from, ec.value());
  return {};
}

// Whether a memory snapshot's image is all there: its tier writes it whole or fails.
bool HasMemoryImage(const std::string& dir) {
  std::error_code ec;
  return !std::filesystem::is_empty(dir, ec) && !ec;
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
    bool complete = row.state == "ready" && ::stat((storage_->SnapshotDir(row.id) + "/upper").c_str(), &st) == 0 &&
                    (row.memory.empty() || HasMemoryImage(storage_->MemoryDir(row.id)));
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

Result<store::SnapshotRow> SandboxManagerImpl::Capture(const std::string& sandbox_id, const std::string& name,
                                                       bool memory) {
  // No pause, resume, stop, start or delete meanwhile: the freeze below is ours alone.
  auto held = LockForChange(sandbox_id);
  if (!held) return held.error();
  Sandbox* sb = held->sandbox.get();
  store::SnapshotRow row;
  State state;
  bool on_disk = false;
  {
    std::lock_guard lock(mu_);
    state = sb->state;
    on_disk = sb->on_disk;
    // The settings without the preview token: it is this sandbox's alone, and snapshots are
    // exported.
    SandboxSpec settings = sb->info.spec;
    settings.preview.token.clear();
    row.spec_json = SpecToJson(settings);
    row.image = sb->info.spec.image;
    row.uid_base = sb->uid_base;
  }
  if (const Plan plan = PlanFor(Call::kSnapshot, state, on_disk); plan.step == Step::kRefuse)
    return WrongState(sandbox_id, StateName(state), plan.why);
  if (!sb->tier->capabilities().filesystem_snapshot)
    return MakeError(ErrorCode::kInvalid, "the " + sb->tier->name() + " runtime has no snapshots", "runtime_unsupported");
  if (memory) {
    if (!sb->tier->capabilities().memory_snapshot) return NoMemorySnapshots(*sb->tier, tiers_);
    if (state == State::kStopped)
      return WrongState(sandbox_id, StateName(state),
                        "a stopped sandbox has no memory to capture (\"memory\": false captures its files)");
    row.memory = sb->tier->MemoryFormat();
  }
  row.id = "snap_" + NewId();
  row.name = name;
  row.sandbox_id = sandbox_id;
  row.created_at = Rfc3339(static_cast<time_t>(UnixMillis() / 1000));
  row.state = "creating";
  BH_TRY(db_->PutSnapshot(row));
  ScopeGuard undo([&] { DropSnapshot(row.id); });
  // Frozen, nothing in the sandbox writes while the capture is cut: files are whole.
  const bool freeze = state == State::kRunning;
  const auto frozen_at = std::chrono::steady_clock::now();
  if (freeze) BH_TRY(SetFrozen(*sb, true));
  // Memory first: the tier's checkpoint writes back what its kernel holds of the files, so
  // the files captured after it are those its processes saw. A sandbox paused to disk has its
  // image already, as of its files: the snapshot links it (an image is never written again).
  Status captured;
  if (memory) {
    auto image = storage_->MakeMemoryDir(row.id);
    if (!image)
      captured = image.error();
    else if (on_disk)
      captured = LinkFiles(MemoryImageDir(sandbox_id), *image);
    else
      captured = sb->tier->Checkpoint(HostName(sandbox_id), sb->handle, *image);
  }
  if (captured) captured = storage_->CaptureSnapshot(sandbox_id, row.id);
  if (freeze) {
    if (auto thawed = SetFrozen(*sb, false); !thawed) {
      spdlog::error("sandbox {}: thaw after snapshot: {}", sandbox_id, thawed.error().message);
      if (captured) captured = thawed.error();
    }
  }
  if (!captured) return captured.error();
  if (freeze)
    spdlog::info("sandbox {}: frozen {} ms for a snapshot{}", sandbox_id,
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - frozen_at).count(),
                 memory ? " with memory" : "");
  undo.Dismiss();
  return row;
}

Result<SnapshotInfo> SandboxManagerImpl::CreateSnapshot(const std::string& sandbox_id, const std::string& name,
                                                        bool memory) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  std::string tenant;
  std::shared_ptr<void> claim;  // the tenant's snapshot count, until this one is listed
  {
    std::lock_guard lock(mu_);
    if (auto sb = FindLocked(sandbox_id)) tenant = sb->info.spec.tenant;  // (Capture answers 404 otherwise)
    Amounts one;
    one[Resource::kSnapshots] = 1;
    auto claimed = ClaimLocked(tenant, one);
    if (!claimed) return claimed.error();
    claim = *claimed;
  }
  auto row = Capture(sandbox_id, name, memory);
  if (!row) return row.error();
  ScopeGuard undo([&] { DropSnapshot(row->id); });
  if (auto size = storage_->SnapshotSizeBytes(row->id)) row->size_bytes = *size;
  row->state = "ready";
  BH_TRY(db_->PutSnapshot(*row));
  // Its bytes are known only now: one that would pass the tenant's quota of them goes again.
  std::lock_guard lock(mu_);
  if (auto quota = quotas_.find(tenant); quota != quotas_.end()) {
    Amounts bytes;
    bytes[Resource::kSnapshotBytes] = static_cast<double>(row->size_bytes);
    BH_TRY(CheckQuota(tenant, quota->second, UsageLocked(tenant, UnixMillis()), bytes));
  }
  undo.Dismiss();
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
  std::vector<std::shared_ptr<Sandbox>> pooled;
  {
    std::unique_lock lock(mu_);
    // Refused while a sandbox, a create or an export uses it. A warm-pool refill launching
    // from it is not the caller's doing: it is told to give up (the snapshot's pools go, so
    // the refill tears down what it made) and waited for.
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
      pooled = ColdSnapshotLocked(id);
      snapshot_released_.wait_for(lock, std::chrono::seconds(30), [&] {
        auto it = snapshots_.find(id);
        return it == snapshots_.end() || it->second.refills == 0;
      });
      user = in_use();
      if (!user) return NoSnapshot(id);
      if (user->empty() && snapshots_.at(id).users > 0) user = "a warm-pool sandbox still being made from it";
    }
    if (!user->empty()) {
      lock.unlock();
      for (const auto& sb : pooled) (void)Teardown(*sb);
      return MakeError(ErrorCode::kConflict, "snapshot " + id + " is used by " + *user, "snapshot_in_use");
    }
    snapshots_.erase(id);
    for (auto& sb : ColdSnapshotLocked(id)) pooled.push_back(std::move(sb));
  }
  for (const auto& sb : pooled) (void)Teardown(*sb);
  // The row goes first: files without a row are collected at the next start.
  BH_TRY(db_->RemoveSnapshot(id));
  if (auto st = storage_->DestroySnapshot(id); !st) spdlog::warn("snapshot {}: {}", id, st.error().message);
  return {};
}

Result<SandboxSpec> SandboxManagerImpl::RestorableSpec(const SnapshotEntry& entry, const std::string& runtime) const {
  auto taken = SpecFromJson(entry.spec_json);
  if (!taken) return taken.error();
  const std::string& id = entry.info.id;
  if (!runtime.empty() && runtime != taken->runtime)
    return MakeError(ErrorCode::kInvalid,
                     "snapshot " + id + " holds the memory of a " + taken->runtime + " sandbox: only the " +
                         taken->runtime + " runtime restores it (leave \"runtime\" out)",
                     "runtime_unsupported");
  auto tier = tiers_.Find(taken->runtime);
  if (!tier) return tier.error();
  if ((*tier)->MemoryFormat() != entry.memory)
    return MakeError(ErrorCode::kInvalid,
                     "snapshot " + id + " holds memory in the format of " + entry.memory + ", and this host runs " +
                         ((*tier)->MemoryFormat().empty() ? "no such runtime" : (*tier)->MemoryFormat()) +
                         ": its processes cannot be restored here",
                     "snapshot_incompatible");
  return *taken;
}

Result<SandboxInfo> SandboxManagerImpl::CreateFromSnapshot(SandboxSpec spec) {
  const std::string snapshot_id = *spec.from_snapshot;
  // Held until Admit has listed the sandbox, which holds the snapshot from then on.
  auto use = UseSnapshot(snapshot_id);
  if (!use) return use.error();
  const SnapshotEntry& entry = use->first;
  const std::string& image = entry.info.image;
  if (spec.image.empty()) spec.image = image;
  if (spec.image != image)
    return MakeError(ErrorCode::kInvalid, "snapshot " + snapshot_id + " is of image \"" + image +
                                              "\": a sandbox started from it runs that image");
  if (!entry.memory.empty()) {
    // Its processes resume where they were, on its runtime, with the limits and volumes they
    // had (a tier's restore takes the mounts it saved); then the create's limits, disk cap,
    // preview and sudo users are given to it as to a pooled sandbox, and its network by Admit.
    auto taken = RestorableSpec(entry, spec.runtime);
    if (!taken) return taken.error();
    if (!spec.volumes.empty() && spec.volumes != taken->volumes)
      return MakeError(ErrorCode::kInvalid, "snapshot " + snapshot_id +
                                                " holds processes that use its volumes: a sandbox restored from it "
                                                "mounts those (leave \"volumes\" out)");
    spec.runtime = taken->runtime;
    spec.volumes = taken->volumes;
    if (spec.memory_mb == 0) spec.memory_mb = taken->memory_mb;
    SandboxSpec boot = *taken;
    boot.image = image;
    boot.from_snapshot = snapshot_id;
    // A memory snapshot restored again keeps one restore ready, held frozen (Refill): taken,
    // it is thawed and goes on from where the image has it, as a restore made now would.
    const std::optional<PoolKey> key = MemoryPoolKey(boot);
    std::vector<std::shared_ptr<Sandbox>> cold;
    std::shared_ptr<void> claim;  // the tenant's quota, until Admit has listed the sandbox
    {
      std::lock_guard lock(mu_);
      auto claimed = ClaimCreatesLocked(spec, 1);
      if (!claimed) return claimed.error();
      claim = *claimed;
      if (key) cold = WarmSnapshotLocked(*key);
    }
    for (const auto& sb : cold) (void)Teardown(*sb);
    if (auto pooled = key ? TakePooled(*key) : nullptr) {
      if (Status thawed = SetFrozen(*pooled, false); !thawed) {
        spdlog::warn("warm pool: sandbox {}: {}", pooled->info.id, thawed.error().message);
        (void)Teardown(*pooled);
      } else if (FitPooled(*pooled, spec)) {
        return Admit(pooled);
      }
    }
    auto sb = Launch(boot, LayerSource{snapshot_id, entry.uid_base, storage_->MemoryDir(snapshot_id)});
    Status fitted = sb ? FitPooled(**sb, spec) : sb.error();
    if (!fitted) {
      std::lock_guard lock(mu_);
      stats_.sandbox_create_failures_total++;
      return fitted.error();
    }
    return Admit(*sb);
  }
  if (spec.runtime.empty()) spec.runtime = config_.default_runtime;
  if (spec.memory_mb == 0) spec.memory_mb = SandboxSpec{}.memory_mb;
  BH_TRY(tiers_.Find(spec.runtime));
  const LayerSource source{snapshot_id, entry.uid_base};
  std::vector<std::shared_ptr<Sandbox>> cold;
  std::shared_ptr<void> claim;  // the tenant's quota, until Admit has listed the sandbox
  {
    std::lock_guard lock(mu_);
    auto claimed = ClaimCreatesLocked(spec, 1);
    if (!claimed) return claimed.error();
    claim = *claimed;
    if (auto key = PoolKeyFor(spec); key && spec.warm_snapshot) cold = WarmSnapshotLocked(*key);
  }
  for (const auto& sb : cold) (void)Teardown(*sb);
  if (auto pooled = TakePooled(spec); pooled && FitPooled(*pooled, spec)) return Admit(pooled);
  auto sb = Launch(spec, source);
  if (!sb) {
    std::lock_guard lock(mu_);
    stats_.sandbox_create_failures_total++;
    return sb.error();
  }
  return Admit(*sb);
}

Result<std::vector<SandboxInfo>> SandboxManagerImpl::Fork(const std::string& sandbox_id, int count, bool memory) {
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  std::shared_ptr<void> claim;  // the tenant's quota, until the copies are listed
  {
    std::lock_guard lock(mu_);
    auto parent = FindLocked(sandbox_id);
    if (!parent) return NoSandbox(sandbox_id);
    auto claimed = ClaimCreatesLocked(parent->info.spec, count);
    if (!claimed) return claimed.error();
    claim = *claimed;
  }
  // One capture (one freeze) for all copies; it is never listed and goes when they exist.
  auto row = Capture(sandbox_id, "", memory);
  if (!row) return row.error();
  ScopeGuard drop([&] { DropSnapshot(row->id); });
  auto spec = SpecFromJson(row->spec_json);
  if (!spec) return spec.error();
  spec->from_snapshot.reset();  // a fork's files come from its parent, not from a listed snapshot
  spec->network = WithTenantDeny(std::move(spec->network), TenantEgressOf(spec->tenant));
  // With memory, each copy resumes its parent's processes from the one image.
  const LayerSource source{row->id, row->uid_base, memory ? storage_->MemoryDir(row->id) : ""};
  // The copies boot side by side: a fork of ten costs about one boot per core, not ten.
  std::vector<std::optional<Result<std::shared_ptr<Sandbox>>>> launched(static_cast<size_t>(count));
  {
    std::vector<std::thread> boots;
    for (size_t i = 0; i < launched.size(); ++i) {
      boots.emplace_back([&, i] { launched[i] = Launch(*spec, source); });
    }
    for (auto& boot : boots) boot.join();
  }
  std::vector<SandboxInfo> forks;
  std::optional<Error> failed;
  for (auto& sb : launched) {
    if (failed) {
      if (sb->ok()) (void)Teardown(***sb);
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
  const std::string upper = storage_->SnapshotDir(id) + "/upper";
  if (entry.memory.empty()) return storage::ExportSnapshotTree(upper, entry.uid_base, metadata.dump(), out_fd);
  if (config_.memory_image_key.empty())
    return MakeError(ErrorCode::kUnavailable, "this daemon has no memory image key to export a memory image with");
  metadata["memory"] = entry.memory;
  const storage::MemoryExport memory{storage_->MemoryDir(id), config_.memory_image_key};
  return storage::ExportSnapshotTree(upper, entry.uid_base, metadata.dump(), out_fd, &memory);
}

namespace {

Error BadSnapshotArchive(const std::string& why) {
  return MakeError(ErrorCode::kInvalid, "not a bulkhead snapshot archive: " + why, "invalid_snapshot");
}

Error CannotRestoreHere(const std::string& why) {
  return MakeError(ErrorCode::kInvalid,
                   "the snapshot's memory image cannot be restored on this host: " + why +
                       " (import it with ?memory=false to take its files alone)",
                   "snapshot_incompatible");
}

}  // namespace

Status SandboxManagerImpl::AcceptMemoryImage(const std::string& metadata_json) const {
  if (config_.memory_image_key.empty()) return CannotRestoreHere("this daemon has no memory image key");
  nlohmann::json metadata = nlohmann::json::parse(metadata_json, nullptr, false);
  if (!metadata.is_object() || !metadata.contains("memory") || !metadata["memory"].is_string() ||
      !metadata.contains("spec") || !metadata["spec"].is_object())
    return BadSnapshotArchive("its metadata lacks the memory image's format or the settings");
  auto spec = SpecFromJson(metadata["spec"].dump());
  if (!spec) return BadSnapshotArchive("its settings do not parse: " + spec.error().message);
  const std::string format = metadata["memory"].get<std::string>();
  auto tier = tiers_.Find(spec->runtime);
  if (!tier) return CannotRestoreHere("it is of a " + spec->runtime + " sandbox, and this host has no such runtime");
  if ((*tier)->MemoryFormat() != format)
    return CannotRestoreHere("it is in the format of " + format + ", and this host's " + spec->runtime + " runs " +
                             ((*tier)->MemoryFormat().empty() ? "no memory snapshots" : (*tier)->MemoryFormat()));
  // Its processes have its volumes open: another host's volumes of those names are other files.
  if (!spec->volumes.empty()) return CannotRestoreHere("its processes use volumes of the host it was taken on");
  return {};
}

Result<SnapshotInfo> SandboxManagerImpl::ImportSnapshot(int in_fd, int64_t max_bytes, bool memory) {
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
  std::optional<storage::MemoryImport> memory_import;
  if (memory) {
    auto dir = storage_->MakeMemoryDir(row.id);
    if (!dir) return dir.error();
    memory_import = storage::MemoryImport{*dir, config_.memory_image_key,
                                          [this](const std::string& metadata) { return AcceptMemoryImage(metadata); }};
  }
  auto imported = storage::ImportSnapshotTree(in_fd, upper, row.uid_base, max_bytes,
                                              memory_import ? &*memory_import : nullptr);
  if (!imported) return imported.error();
  if (memory_import && !imported->memory) (void)::rmdir(memory_import->dir.c_str());
  // (A symlink where a mount goes is refused when a sandbox boots from it: contain.cc.)

  nlohmann::json metadata = nlohmann::json::parse(imported->metadata, nullptr, false);
  if (!metadata.is_object() || !metadata.contains("image") || !metadata["image"].is_string() ||
      !metadata.contains("spec") || !metadata["spec"].is_object()) {
    return BadSnapshotArchive("its metadata lacks the image or the settings");
  }
  row.image = metadata["image"].get<std::string>();
  if (!storage_->ImageVisible(row.image, "")) {  // (an import is the host's)
    return MakeError(ErrorCode::kInvalid, "the snapshot is of image \"" + row.image +
                                              "\", which this host does not have: import the image first",
                     "image_not_found");
  }
  auto spec = SpecFromJson(metadata["spec"].dump());
  if (!spec) return BadSnapshotArchive("its settings do not parse: " + spec.error().message);
  spec->image = row.image;
  spec->from_snapshot.reset();
  spec->volumes.clear();  // names of another host's volumes (a memory image has none: AcceptMemoryImage)
  spec->tenant.clear();   // another host's tenant: an import is the host admin's
  row.spec_json = SpecToJson(*spec);
  if (imported->memory) row.memory = metadata["memory"].get<std::string>();  // checked by AcceptMemoryImage
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
