#include "core/host_limits.h"

#include <sys/resource.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <fstream>

#include <spdlog/spdlog.h>

#include "runtime/uid_ranges.h"

namespace bulkhead::core {

int64_t DefaultMaxSandboxes(int64_t memory_mib) {
  return std::clamp<int64_t>(memory_mib / 4, 64, runtime::kSlots);
}

int64_t HostMemoryMib() {
  struct sysinfo info {};
  if (::sysinfo(&info) != 0) return 0;
  return static_cast<int64_t>(info.totalram) * info.mem_unit / (1024 * 1024);
}

std::vector<KernelLimit> KernelLimitsFor(int64_t max_sandboxes) {
  const int64_t n = max_sandboxes;
  std::vector<KernelLimit> limits = {
      {"kernel/pid_max", 16 * n + 32768},
      {"fs/inotify/max_user_instances", 8 * n + 1024},
      {"user/max_user_namespaces", 2 * n + 1024},
  };
  for (const char* kind : {"mnt", "pid", "net", "ipc", "uts", "cgroup"})
    limits.push_back({std::string("user/max_") + kind + "_namespaces", n + 1024});
  return limits;
}

namespace {

bool ReadNumber(const std::string& path, int64_t& value) {
  std::ifstream in(path);
  return static_cast<bool>(in >> value);
}

// Each connection and each sandbox holds descriptors; the default soft limit (1024) is far
// below that. The hard limit goes to 1M first (root may): the sandboxes' launchers give their
// inits and gVisor's Sentry that much, and they cannot raise it themselves. Under a shell's
// 20000, a gVisor sandbox watching or holding open that many directories left its Sentry no
// descriptor for init's connection.
void RaiseFileLimit(int64_t max_sandboxes) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_max < rlim_t(1) << 20) {
    rlimit raised = {limit.rlim_cur, rlim_t(1) << 20};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const rlim_t wanted = std::min<rlim_t>(limit.rlim_max, std::max<rlim_t>(65536, 16 * max_sandboxes));
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = wanted;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

void RaiseHostLimits(int64_t max_sandboxes) {
  RaiseFileLimit(max_sandboxes);
  for (const KernelLimit& limit : KernelLimitsFor(max_sandboxes)) {
    const std::string path = "/proc/sys/" + limit.path;
    int64_t current = 0;
    if (!ReadNumber(path, current) || current >= limit.needed) continue;
    std::ofstream(path) << limit.needed;
    int64_t now = 0;
    if (ReadNumber(path, now) && now >= limit.needed) {
      spdlog::info("raised {} from {} to {} for {} sandboxes", limit.path, current, limit.needed, max_sandboxes);
    } else {
      spdlog::warn("{} is {}, below the {} that {} sandboxes may need, and could not be raised", limit.path,
                   current, limit.needed, max_sandboxes);
    }
  }
}

}  // namespace bulkhead::core
