// The core against a fake tier (tests/support/fake_tier.h): the real manager, state database
// and storage, with sandboxes that are entries in a FakeTier::World. State transitions, crash
// recovery, warm-pool refill and timeouts.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "core/manager_impl.h"
#include "core/sandbox_manager.h"
#include "core/spec_json.h"
#include "storage/fs_util.h"
#include "store/state_db.h"
#include "support/fake_tier.h"
#include "support/temp_state_dir.h"

namespace bulkhead {
namespace {

using core::SandboxSpec;
using testing::FakeTier;

// Polls `done` for up to `seconds` (the manager's threads act on their own time).
bool Eventually(const std::function<bool()>& done, int seconds = 20) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

class CoreManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.state_dir = state_dir_.path();
    config_.storage_gb = 4;
    config_.warm_pool = 0;
    config_.listen = "";
    config_.e2b_listen = "";
  }

  // A manager (a daemon start) on the fake tier; the world stays across restarts.
  void Open(runtime::Capabilities caps = FakeTier::AllCapabilities()) {
    manager_.reset();
    core::TierSet tiers;
    tiers.Add(std::make_unique<FakeTier>(world_, caps));
    tiers.Lack("gvisor", "runsc is not installed");
    auto opened = core::SandboxManager::Open(config_, std::move(tiers));
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    manager_ = std::move(*opened);
  }

  std::string Create(SandboxSpec spec = {}) {
    auto made = manager_->Create(spec);
    EXPECT_TRUE(made.ok()) << made.error().message;
    return made.ok() ? made->id : "";
  }
  std::string StateOf(const std::string& id) {
    auto got = manager_->Get(id);
    return got.ok() ? got->state : "(" + got.error().detail_code + ")";
  }
  std::optional<FakeTier::Box> BoxOf(const std::string& id) { return world_.Find(core::HostName(id)); }

  testing::TempStateDir state_dir_{"bh-core"};  // first: it outlives the manager on it
  core::DaemonConfig config_;
  FakeTier::World world_;
  std::unique_ptr<core::SandboxManager> manager_;
};

TEST_F(CoreManagerTest, PauseResumeStopStartAndDeleteMoveThroughTheirStates) {
  Open();
  const std::string id = Create();
  EXPECT_EQ(StateOf(id), "running");
  ASSERT_TRUE(BoxOf(id));

  ASSERT_TRUE(manager_->Pause(id).ok());
  EXPECT_EQ(StateOf(id), "paused");
  EXPECT_TRUE(BoxOf(id)->frozen);
  EXPECT_TRUE(manager_->Pause(id).ok()) << "pausing a paused sandbox is not an error";
  ASSERT_TRUE(manager_->Resume(id).ok());
  EXPECT_EQ(StateOf(id), "running");
  EXPECT_FALSE(BoxOf(id)->frozen);

  ASSERT_TRUE(manager_->Stop(id).ok());
  EXPECT_EQ(StateOf(id), "stopped");
  EXPECT_FALSE(BoxOf(id)) << "a stopped sandbox keeps nothing in its tier";
  auto resumed = manager_->Resume(id);
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.error().code, ErrorCode::kConflict);
  auto paused = manager_->Pause(id);
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().code, ErrorCode::kConflict);

  ASSERT_TRUE(manager_->Start(id).ok());
  EXPECT_EQ(StateOf(id), "running");
  EXPECT_TRUE(BoxOf(id)) << "start boots it again";
  EXPECT_EQ(world_.launches, 2);

  ASSERT_TRUE(manager_->Delete(id).ok());
  EXPECT_EQ(StateOf(id), "(sandbox_not_found)");
  EXPECT_EQ(world_.Count(), 0);
}

TEST_F(CoreManagerTest, ASandboxWhoseInitDiedIsInErrorAndStartBootsItAgain) {
  Open();
  const std::string id = Create();
  world_.Kill(core::HostName(id));
  auto paused = manager_->Pause(id);
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().code, ErrorCode::kConflict);
  EXPECT_EQ(StateOf(id), "error");
  ASSERT_TRUE(manager_->Start(id).ok());
  EXPECT_EQ(StateOf(id), "running");
  EXPECT_TRUE(BoxOf(id)->alive);
}

TEST_F(CoreManagerTest, ATierTheHostLacksIsA422NamingWhatIsMissing) {
  Open();
  SandboxSpec spec;
  spec.runtime = "gvisor";
  auto made = manager_->Create(spec);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, ErrorCode::kInvalid);
  EXPECT_EQ(made.error().detail_code, "runtime_unavailable");
  EXPECT_NE(made.error().message.find("runsc is not installed"), std::string::npos) << made.error().message;
  spec.runtime = "microvm";  // not even named by the host
  made = manager_->Create(spec);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().detail_code, "runtime_unavailable");
  EXPECT_EQ(world_.launches, 0);
}

TEST_F(CoreManagerTest, WhatATierCannotDoIsRefusedBeforeItIsTried) {
  runtime::Capabilities caps = FakeTier::AllCapabilities();
  caps.pause = false;
  caps.filesystem_snapshot = false;
  Open(caps);
  const std::string id = Create();
  auto paused = manager_->Pause(id);
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().detail_code, "runtime_unsupported");
  EXPECT_EQ(StateOf(id), "running");
  EXPECT_FALSE(BoxOf(id)->frozen);
  auto snapshot = manager_->CreateSnapshot(id, "s", false);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.error().detail_code, "runtime_unsupported");
  EXPECT_TRUE(manager_->ListSnapshots().empty());
}

TEST_F(CoreManagerTest, ARestartReattachesLiveSandboxesAndCleansUpWhatACrashLeft) {
  Open();
  SandboxSpec forever;
  forever.timeout_s = 0;
  const std::string running = Create(forever), paused = Create(forever), stopped = Create(forever),
                    died = Create(forever);
  ASSERT_TRUE(manager_->Pause(paused).ok());
  ASSERT_TRUE(manager_->Stop(stopped).ok());
  manager_.reset();  // the daemon goes; the sandboxes stay

  // What a crash leaves: an init that died meanwhile, rows of a launch cut short, of a pooled
  // sandbox and of a delete cut short (their boxes made), and a box of this daemon without
  // any row.
  world_.Kill(core::HostName(died));
  const std::vector<std::string> unfinished = {"startingstartingstar", "pooledpooledpooledpo", "deletingdeletingdele"};
  {
    auto db = store::StateDb::Open(config_.state_dir + "/bulkhead.db");
    ASSERT_TRUE(db.ok()) << db.error().message;
    for (const std::string& id : unfinished) {
      store::SandboxRow row;
      row.id = id;
      row.state = id[0] == 's' ? "starting" : id[0] == 'p' ? "pooled" : "deleting";
      row.spec_json = core::SpecToJson(SandboxSpec{});
      row.created_at = "2026-01-01T00:00:00.000Z";
      ASSERT_TRUE((*db)->Put(row).ok());
      std::lock_guard lock(world_.mu);
      world_.boxes[core::HostName(id)] = FakeTier::Box{};
    }
  }
  {
    std::lock_guard lock(world_.mu);
    world_.boxes["sb-0123456789abcdef"] = FakeTier::Box{};
  }

  Open();
  EXPECT_EQ(StateOf(running), "running");
  EXPECT_EQ(StateOf(paused), "paused");
  EXPECT_TRUE(BoxOf(paused)->frozen);
  EXPECT_EQ(StateOf(stopped), "stopped");
  EXPECT_EQ(StateOf(died), "stopped") << "an init gone while the daemon was away";
  for (const std::string& id : unfinished) {
    EXPECT_EQ(StateOf(id), "(sandbox_not_found)");
    EXPECT_FALSE(world_.Find(core::HostName(id))) << id;
  }
  EXPECT_FALSE(world_.Find("sb-0123456789abcdef"));
  EXPECT_EQ(world_.Count(), 2);  // running and paused
  EXPECT_EQ(manager_->List({}).size(), 4u);

  ASSERT_TRUE(manager_->Resume(paused).ok());
  ASSERT_TRUE(manager_->Start(died).ok());
  EXPECT_EQ(StateOf(died), "running");
}

TEST_F(CoreManagerTest, TheWarmPoolRefillsAndItsSandboxesGetTheCreatesLimits) {
  config_.warm_pool = 2;
  Open();
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  EXPECT_EQ(world_.launches, 2);
  SandboxSpec spec;
  spec.memory_mb = 256;
  spec.pids = 64;
  const std::string id = Create(spec);
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, 1);
  EXPECT_EQ(BoxOf(id)->limits.memory_mb, 256) << "a pooled sandbox is given the create's limits";
  EXPECT_EQ(BoxOf(id)->limits.pids, 64);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  EXPECT_EQ(world_.launches, 3);

  // With the limits it booted with, a pooled sandbox is handed out as it is.
  const int changes = world_.limit_changes;
  const std::string plain = Create(SandboxSpec{});
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, 2);
  EXPECT_EQ(world_.limit_changes, changes);
  EXPECT_EQ(BoxOf(plain)->limits.memory_mb, SandboxSpec{}.memory_mb);
}

TEST_F(CoreManagerTest, PooledSandboxesBootInTheBackgroundAndAreForegroundOnceHandedOut) {
  config_.warm_pool = 1;
  Open();
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 1; }));
  {
    std::lock_guard lock(world_.mu);
    ASSERT_EQ(world_.boxes.size(), 1u);
    EXPECT_TRUE(world_.boxes.begin()->second.background) << "a pool's boot yields the CPU";
  }
  const std::string id = Create(SandboxSpec{});
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, 1);
  EXPECT_FALSE(BoxOf(id)->background);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 1; }));
  // The pool's next one boots in the background again.
  {
    std::lock_guard lock(world_.mu);
    int background = 0;
    for (const auto& [name, box] : world_.boxes) background += box.background;
    EXPECT_EQ(background, 1);
  }
}

TEST_F(CoreManagerTest, AnotherRuntimesPoolFillsFromItsFirstCreate) {
  config_.warm_pool = 1;
  config_.runtime_warm_pools.clear();  // (as `--warm-pool 1`)
  core::TierSet tiers;
  tiers.Add(std::make_unique<FakeTier>(world_));
  tiers.Add(std::make_unique<FakeTier>(world_, FakeTier::AllCapabilities(), "gvisor"));
  auto opened = core::SandboxManager::Open(config_, std::move(tiers));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  manager_ = std::move(*opened);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(world_.launches, 1) << "only the default runtime's pool fills at start";

  SandboxSpec spec;
  spec.runtime = "gvisor";
  Create(spec);  // booted for it: the pool was empty
  EXPECT_EQ(manager_->Stats().warm_pool_misses_total, 1);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  Create(spec);
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, 1);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  EXPECT_EQ(world_.launches, 4);  // native's pool, gvisor's first create, its pool and the refill
}

TEST_F(CoreManagerTest, APoolOfGuestsServesOnlyCreatesOfItsShapeWithoutANetwork) {
  config_.warm_pool = 1;
  config_.default_runtime = "microvm";
  core::TierSet tiers;
  runtime::Capabilities caps = FakeTier::AllCapabilities();
  caps.nic_from_boot = true;
  auto guests = std::make_unique<FakeTier>(world_, caps, "microvm");
  guests->memory_from_boot = true;
  tiers.Add(std::move(guests));
  auto opened = core::SandboxManager::Open(config_, std::move(tiers));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  manager_ = std::move(*opened);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 1; }));

  SandboxSpec other_size, with_network, plain;
  other_size.runtime = with_network.runtime = plain.runtime = "microvm";
  other_size.memory_mb = 512;
  with_network.network.mode = "allowlist";
  with_network.network.allow = {"a.test"};
  for (const SandboxSpec& spec : {other_size, with_network}) {
    const std::string id = Create(spec);
    EXPECT_EQ(manager_->Stats().warm_pool_hits_total, 0) << "not a create the pooled guest can serve";
    EXPECT_EQ(manager_->Stats().warm_pool_ready, 1);
    EXPECT_EQ(BoxOf(id)->limits.memory_mb, spec.memory_mb);
  }
  const std::string id = Create(plain);
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, 1);
  EXPECT_EQ(BoxOf(id)->limits.memory_mb, 1024);
}

TEST_F(CoreManagerTest, AMemorySnapshotRestoredAgainIsTakenFromItsPoolHeldFrozenAndThawed) {
  config_.warm_pool = 1;
  core::TierSet tiers;
  runtime::Capabilities caps = FakeTier::AllCapabilities();
  caps.memory_snapshot = true;
  auto tier = std::make_unique<FakeTier>(world_, caps);
  tier->memory_format = "fake 1";
  tiers.Add(std::move(tier));
  auto opened = core::SandboxManager::Open(config_, std::move(tiers));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  manager_ = std::move(*opened);
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 1; }));  // the image's pool

  SandboxSpec forever;
  forever.timeout_s = 0;
  const std::string source = Create(forever);
  auto snapshot = manager_->CreateSnapshot(source, "s", true);
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  SandboxSpec from;
  from.from_snapshot = snapshot->id;
  const int64_t hits = manager_->Stats().warm_pool_hits_total;  // (the source came from the image's pool)
  const std::string first = Create(from);
  EXPECT_TRUE(BoxOf(first)->restored);
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, hits) << "a first restore is made cold";

  // The snapshot's pool: one restore, held frozen.
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  auto held = [&] {
    std::lock_guard lock(world_.mu);
    int n = 0;
    for (const auto& [name, box] : world_.boxes) n += box.restored && box.background && box.frozen;
    return n;
  };
  EXPECT_EQ(held(), 1);

  from.pids = 64;
  from.metadata = {{"pooled", "yes"}};
  const std::string copy = Create(from);
  EXPECT_EQ(manager_->Stats().warm_pool_hits_total, hits + 1);
  auto box = BoxOf(copy);
  ASSERT_TRUE(box);
  EXPECT_TRUE(box->restored);
  EXPECT_FALSE(box->frozen) << "thawed as it is handed out";
  EXPECT_FALSE(box->background);
  EXPECT_EQ(box->limits.pids, 64) << "with the create's limits";
  auto info = manager_->Get(copy);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->parent_snapshot, snapshot->id);
  EXPECT_EQ(info->spec.metadata, from.metadata);
  ASSERT_TRUE(Eventually([&] { return held() == 1; })) << "refilled";

  // Deleting the snapshot (its sandboxes first) takes its pool with it.
  ASSERT_TRUE(manager_->Delete(first).ok());
  ASSERT_TRUE(manager_->Delete(copy).ok());
  ASSERT_TRUE(manager_->DeleteSnapshot(snapshot->id).ok());
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(manager_->Stats().warm_pool_ready, 1);
}

TEST_F(CoreManagerTest, ShutdownTearsDownThePoolsButNotTheSandboxes) {
  config_.warm_pool = 2;
  Open();
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  ASSERT_TRUE(manager_->Create({}).ok());
  ASSERT_TRUE(Eventually([&] { return manager_->Stats().warm_pool_ready == 2; }));
  EXPECT_EQ(world_.Count(), 3);
  manager_->Shutdown();
  EXPECT_EQ(world_.Count(), 1) << "user sandboxes outlive the daemon; pooled ones do not";
  auto db = store::StateDb::Open(config_.state_dir + "/bulkhead.db");
  ASSERT_TRUE(db.ok());
  auto rows = (*db)->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->front().state, "running");
}

TEST_F(CoreManagerTest, TimeoutsDeletePauseOrStopAndIdleSandboxesPause) {
  Open();
  SandboxSpec kill, pause, stop, idle;
  kill.timeout_s = pause.timeout_s = stop.timeout_s = 1;
  pause.on_timeout = "pause";
  stop.on_timeout = "stop";
  idle.timeout_s = 0;
  idle.idle_timeout_s = 1;
  const std::string killed = Create(kill), paused = Create(pause), stopped = Create(stop), idled = Create(idle);
  EXPECT_TRUE(Eventually([&] { return StateOf(killed) == "(sandbox_not_found)"; }));
  EXPECT_TRUE(Eventually([&] { return StateOf(paused) == "paused"; }));
  EXPECT_TRUE(Eventually([&] { return StateOf(stopped) == "stopped"; }));
  EXPECT_TRUE(Eventually([&] { return StateOf(idled) == "paused"; }));
  EXPECT_FALSE(BoxOf(killed));
  EXPECT_TRUE(BoxOf(paused)->frozen);
  EXPECT_FALSE(BoxOf(stopped));
  // A paused sandbox's clock waits: resumed, it has its whole timeout again.
  auto resumed = manager_->Resume(paused);
  ASSERT_TRUE(resumed.ok());
  EXPECT_TRUE(resumed->expires_at.has_value());
}

}  // namespace
}  // namespace bulkhead
