// Out-of-memory handling for tiers whose sandbox is one host process tree that the kernel's
// OOM killer must not pick from (gvisor: killing the Sentry or one of its stubs ends the whole
// sandbox). The host's OOM killer is kept away from the sandbox's group, and the daemon is told
// when the group runs out of memory that reclaim cannot free; it then has init kill the
// sandbox's largest process, as the kernel would have (ctl::kReclaim).
//   v1  memory.oom_control: the OOM killer off for the group, and an eventfd on it
//       (cgroup.event_control) that fires when the group is under OOM: its tasks wait in the
//       kernel, and the watch lets the group grow by kRescueBytes while init reclaims.
//   v2  memory.high at the limit (the kernel throttles the group above it and reclaims), and
//       memory.events polled: a rise of its "high" count with memory.current still above the
//       limit is the same signal; memory.max a little above stays the last resort.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.h"
#include "common/unique_fd.h"
#include "runtime/cgroup.h"

namespace bulkhead::runtime {

class MemoryWatch {
 public:
  // What the watch calls (on its own thread) when the sandbox `id` ran out of memory: true if
  // something was freed (a process killed).
  using Reclaim = std::function<bool(const std::string& id)>;
  // How far a group under OOM may grow while its init reclaims (v1).
  static constexpr int64_t kRescueBytes = 64 << 20;

  explicit MemoryWatch(Cgroups& cgroups);
  ~MemoryWatch();

  void SetReclaim(Reclaim reclaim);
  // Starts watching the sandbox's group, whose host memory limit is `limit_bytes` (again after
  // a change of limits or a daemon restart).
  Status Watch(const std::string& id, int64_t limit_bytes);
  void Forget(const std::string& id);

 private:
  struct Watched {
    UniqueFd event;  // v1: the eventfd; v2: memory.events
    int64_t limit_bytes = 0;
  };
  void Loop();
  void Handle(const std::string& id);

  Cgroups& cgroups_;
  UniqueFd epoll_, stop_;
  std::mutex mu_;  // guards watched_ and reclaim_
  std::map<std::string, Watched> watched_;
  std::map<int, std::string> ids_;  // by event fd
  Reclaim reclaim_;
  std::thread thread_;
};

}  // namespace bulkhead::runtime
