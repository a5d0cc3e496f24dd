// After a restart: re-attach to sandboxes whose init still runs, and free everything a crash
// left half-made (rows still "starting", "pooled" or "deleting", tier leftovers and layers
// without a row).
#include <filesystem>
#include <set>
#include <spdlog/spdlog.h>

#include "common/time_format.h"
#include "core/manager_impl.h"
#include "core/spec_json.h"

namespace bulkhead::core {
namespace fs = std::filesystem;

Status SandboxManagerImpl::Recover() {
  BH_TRY(volumes_.Recover());
  auto rows = db_->LoadAll();
  if (!rows) return rows.error();
  std::set<std::string> known;
  std::error_code ec;
  for (auto& row : *rows) {
    const runtime::SandboxHandle handle{static_cast<pid_t>(row.init_pid), row.init_start_time};
    auto spec = SpecFromJson(row.spec_json);
    if (!spec) {
      spdlog::error("recover: sandbox {}: {}", row.id, spec.error().message);
      continue;
    }
    auto tier = tiers_.Find(spec->runtime);
    if (!tier) {
      spdlog::error("recover: sandbox {}: {}", row.id, tier.error().message);
      continue;
    }
    const std::optional<State> state = ParseState(row.state);
    const bool of_a_build = spec->metadata.contains(kBuildSandboxMetadata);
    if (!state || *state == State::kStarting || *state == State::kPooled || *state == State::kDeleting || of_a_build) {
      spdlog::info("recover: removing unfinished sandbox {} ({}{})", row.id, row.state, of_a_build ? ", a build's" : "");
      (void)Teardown(row.id, **tier, row.uid_base, handle);
      continue;
    }
    auto sb = std::make_shared<Sandbox>();
    sb->tier = *tier;
    sb->info.id = row.id;
    sb->info.spec = *spec;
    sb->info.parent_snapshot = spec->from_snapshot;
    sb->info.created_at = row.created_at;
    sb->uid_base = row.uid_base;
    sb->handle = handle;
    sb->expires_ms = row.expires_at_ms;
    if (row.expires_at_ms) sb->info.expires_at = Rfc3339Millis(row.expires_at_ms);
    if (auto created = ParseRfc3339Millis(row.created_at); created && *created > last_created_ms_)
      last_created_ms_ = *created;
    // A sandbox of a version that named its host objects by the id: renamed in place (its
    // processes and control socket carry on; /proc/net/unix keeps the old path until a restart).
    (void)sb->tier->Rename(row.id, HostName(row.id));
    if (std::string old_dir = config_.state_dir + "/sandboxes/" + row.id; fs::exists(old_dir, ec))
      fs::rename(old_dir, SandboxDir(row.id), ec);
    const bool was_up = *state == State::kRunning || *state == State::kPaused;
    const bool on_disk = *state == State::kPaused && row.on_disk;
    // A memory image is kept only by a sandbox paused to disk: any other is what a pause to disk
    // or a restore the crash cut short left.
    if (!on_disk) fs::remove_all(MemoryImageDir(row.id), ec);
    if (on_disk) {
      // Paused to disk: no process of it runs (a restore the crash cut short is ended), and its
      // memory image waits in its directory for the next call that needs it.
      (void)sb->tier->Destroy(HostName(row.id), handle);
      sb->state = State::kPaused;
      sb->on_disk = true;
      sb->handle = {};
      sb->expires_ms = 0;
      sb->info.expires_at.reset();
      (void)uids_.Reclaim(row.uid_base, row.id);
      (void)db_->Put(RowOf(*sb));
      spdlog::info("recover: sandbox {} is paused to disk", row.id);
    } else if (was_up && sb->tier->Alive(handle)) {
      // The row says what was asked; the tier is brought to it. A frozen sandbox under a
      // "running" row is a snapshot or a pause the crash cut short: thaw it.
      // A paused one was stopped inside first (SetFrozen): the host's freeze holds it as it was.
      sb->state = *state;
      sb->init = sb->tier->Dialer(SandboxDir(row.id));
      if (auto st = sb->tier->Reattach(HostName(row.id), handle, LimitsOf(*spec), SandboxDir(row.id)); !st)
        spdlog::error("recover: sandbox {}: {}", row.id, st.error().message);
      const Status brought = *state == State::kPaused ? sb->tier->SetFrozen(HostName(row.id), true)
                                                      : SetFrozen(*sb, false);
      if (!brought) spdlog::error("recover: sandbox {}: {}", row.id, brought.error().message);
      if (*state == State::kPaused) sb->expires_ms = 0, sb->info.expires_at.reset();
      sb->last_activity_ms = UnixMillis();
      // When it booted is not kept: its CPU share is first counted from its creation.
      sb->booted_ms = ParseRfc3339Millis(row.created_at).value_or(0);
      (void)uids_.Reclaim(row.uid_base, row.id);
      if (auto network = sb->tier->AttachNetwork(handle)) {
        sb->netns = std::move(network->netns);
        // The listeners in its namespace died with the old daemon: serve it again.
        if (sb->info.spec.network.mode != "none") {
          if (auto st = network_->Apply(row.id, sb->netns.get(), sb->info.spec.network); !st)
            spdlog::error("recover: sandbox {}: network: {}", row.id, st.error().message);
        }
      }
      spdlog::info("recover: re-attached to sandbox {} (init pid {})", row.id, handle.pid);
    } else {
      // Its processes are gone (host reboot, or killed) or it was stopped: the files stay,
      // the sandbox is stopped, and POST .../start boots it again.
      sb->state = State::kStopped;
      sb->handle = {};
      sb->expires_ms = 0;
      sb->info.expires_at.reset();
      (void)sb->tier->Destroy(HostName(row.id), handle);
      (void)uids_.Reclaim(row.uid_base, row.id);
      (void)db_->Put(RowOf(*sb));
      if (*state != State::kStopped) spdlog::info("recover: sandbox {} is stopped (its init is gone)", row.id);
    }
    known.insert(row.id);
    volumes_.Attach(row.id, sb->info.spec.tenant, sb->info.spec.volumes);
    sandboxes_[row.id] = sb;
  }
  std::set<std::string> known_names;
  for (const auto& id : known) known_names.insert(HostName(id));
  for (runtime::Tier* tier : tiers_.All())
    for (const auto& name : tier->Leftovers())
      if (!known_names.count(name)) (void)tier->Destroy(name, {});
  for (const auto& id : storage_->ListLayers())
    if (!known.count(id)) (void)storage_->DestroyLayer(id);
  uids_.ReleaseAllBut(known);
  RecoverSnapshots();
  for (const auto& entry : fs::directory_iterator(config_.state_dir + "/sandboxes", ec))
    if (!known_names.count(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
  stats_.sandboxes_running = static_cast<int64_t>(sandboxes_.size());
  return {};
}

}  // namespace bulkhead::core
