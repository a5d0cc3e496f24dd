// A tier that runs nothing: its sandboxes are entries in a World, which outlives the managers
// that use it (a daemon restart keeps the sandboxes "running", as a real tier's do). Core unit
// tests run the real manager, state database and storage on it.
#pragma once
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "runtime/tier.h"

namespace bulkhead::testing {

class FakeTier : public runtime::Tier {
 public:
  struct Box {
    runtime::SandboxHandle handle;
    runtime::Limits limits;
    bool alive = true;
    bool frozen = false;
    bool background = false;  // launched for a warm pool, not yet handed out
    bool restored = false;    // from a memory image
  };
  // What the fake tier's sandboxes are, by host name.
  struct World {
    std::mutex mu;
    std::map<std::string, Box> boxes;
    std::map<pid_t, UniqueFd> netns;  // each box's network namespace, by its handle's pid
    int launches = 0;
    int limit_changes = 0;  // SetLimits calls
    uint64_t next_start_time = 1;

    int Count() {
      std::lock_guard lock(mu);
      return static_cast<int>(boxes.size());
    }
    std::optional<Box> Find(const std::string& name) {
      std::lock_guard lock(mu);
      auto it = boxes.find(name);
      if (it == boxes.end()) return std::nullopt;
      return it->second;
    }
    void Kill(const std::string& name) {  // its init died: the box stays until destroyed
      std::lock_guard lock(mu);
      boxes.at(name).alive = false;
    }
  };

  explicit FakeTier(World& world, runtime::Capabilities caps = AllCapabilities(), std::string name = "native")
      : world_(world), caps_(caps), name_(std::move(name)) {}

  static runtime::Capabilities AllCapabilities() {
    return {.pause = true, .filesystem_snapshot = true, .memory_snapshot = false, .idmapped_volumes = true,
            .pooling = true, .network_egress = true};
  }

  const std::string& name() const override { return name_; }
  runtime::Capabilities capabilities() const override { return caps_; }
  // As a guest's: the memory is kept from the launch on.
  bool memory_from_boot = false;
  std::string BootShape(const runtime::Limits& limits) const override {
    return memory_from_boot ? std::to_string(limits.memory_mb) + "m" : "";
  }

  // Where set, the tier takes memory snapshots (an image of one file) in this format.
  std::string memory_format;
  std::string MemoryFormat() const override { return memory_format; }
  Status Checkpoint(const std::string& id, const runtime::SandboxHandle&, const std::string& image_dir) override {
    if (!world_.Find(id)) return MakeError(ErrorCode::kNotFound, "no box " + id);
    UniqueFd image(::open((image_dir + "/memory").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    return image ? Status{} : SystemError("create the image", errno);
  }

  Result<runtime::SandboxHandle> Launch(const runtime::LaunchSpec& spec) override {
    std::lock_guard lock(world_.mu);
    world_.launches++;
    Box box;
    box.restored = !spec.memory_image.empty();
    box.handle = {static_cast<pid_t>(1000 + world_.launches), world_.next_start_time++};
    box.limits = spec.limits;
    box.background = spec.background;
    world_.boxes[spec.id] = box;
    return box.handle;
  }
  // Nothing listens there: a call that needs init fails as with an init that is gone.
  std::shared_ptr<const runtime::InitDialer> Dialer(const std::string& staging) const override {
    return runtime::UnixSocketDialer(staging + "/fake.sock");
  }
  // A network namespace of the box's own, as a real tier's: the core configures what it is
  // given (routes, nftables, listeners), and the host's own would lose its default route.
  Result<runtime::NetworkAttachment> AttachNetwork(const runtime::SandboxHandle& handle) override {
    if (!Alive(handle)) return MakeError(ErrorCode::kConflict, "the sandbox's init is gone");
    std::lock_guard lock(world_.mu);
    UniqueFd& netns = world_.netns[handle.pid];
    if (!netns) {
      std::thread([&] {
        if (::unshare(CLONE_NEWNET) == 0) netns.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
      }).join();
      if (!netns) return SystemError("a network namespace for the fake box", errno);
    }
    return runtime::NetworkAttachment{UniqueFd(::dup(netns.get()))};
  }
  Status SetLimits(const std::string& id, const runtime::Limits& limits) override {
    std::lock_guard lock(world_.mu);
    auto it = world_.boxes.find(id);
    if (it == world_.boxes.end()) return MakeError(ErrorCode::kNotFound, "no box " + id);
    it->second.limits = limits;
    world_.limit_changes++;
    return {};
  }
  Status Foreground(const std::string& id) override {
    std::lock_guard lock(world_.mu);
    auto it = world_.boxes.find(id);
    if (it == world_.boxes.end()) return MakeError(ErrorCode::kNotFound, "no box " + id);
    it->second.background = false;
    return {};
  }
  Result<runtime::Usage> SandboxUsage(const std::string& id) override {
    if (!world_.Find(id)) return MakeError(ErrorCode::kNotFound, "no box " + id);
    return runtime::Usage{.cpu_s = 0.5, .memory_bytes = 1 << 20, .disk_bytes = 0, .pids = 1};
  }
  Status SetFrozen(const std::string& id, bool frozen) override {
    std::lock_guard lock(world_.mu);
    auto it = world_.boxes.find(id);
    if (it == world_.boxes.end()) return MakeError(ErrorCode::kNotFound, "no box " + id);
    it->second.frozen = frozen;
    return {};
  }
  bool Frozen(const std::string& id) override {
    auto box = world_.Find(id);
    return box && box->frozen;
  }
  bool Alive(const runtime::SandboxHandle& handle) override {
    std::lock_guard lock(world_.mu);
    for (const auto& [name, box] : world_.boxes)
      if (box.alive && box.handle.pid == handle.pid && box.handle.start_time == handle.start_time) return true;
    return false;
  }
  Status Destroy(const std::string& id, const runtime::SandboxHandle&) override {
    std::lock_guard lock(world_.mu);
    world_.boxes.erase(id);
    return {};
  }
  std::vector<std::string> Leftovers() override {
    std::lock_guard lock(world_.mu);
    std::vector<std::string> names;
    for (const auto& [name, box] : world_.boxes) names.push_back(name);
    return names;
  }
  Status Rename(const std::string&, const std::string&) override { return {}; }
  void Release() override {}

 private:
  World& world_;
  runtime::Capabilities caps_;
  std::string name_;
};

}  // namespace bulkhead::testing
