// The native isolation tier: Linux namespaces, an idmapped overlay root, seccomp, trimmed
// capabilities and cgroups. See contain.cc for the steps inside the sandbox, in order.
#pragma once
#include <linux/filter.h>

#include <memory>
#include <string>
#include <vector>

#include "common/id_ranges.h"
#include "common/unique_fd.h"
#include "runtime/native/cgroup.h"
#include "runtime/runtime.h"

namespace bulkhead::runtime::native {

class NativeRuntime : public Runtime {
 public:
  // `tag` names this daemon's cgroup parent; `init_binary` is the static bulkhead-init.
  static Result<std::unique_ptr<NativeRuntime>> Create(const std::string& tag, const std::string& init_binary);

  Result<InitProcess> Launch(const LaunchSpec& spec) override;
  Status SetLimits(const std::string& id, const Limits& limits) override;
  Result<core::SandboxUsage> Usage(const std::string& id) override;
  Status SetFrozen(const std::string& id, bool frozen) override { return cgroups_.SetFrozen(id, frozen); }
  bool Frozen(const std::string& id) override { return cgroups_.Frozen(id); }
  bool Alive(const InitProcess& init) override;
  Status Destroy(const std::string& id, const InitProcess& init) override;
  std::vector<std::string> ListCgroups() override;
  Status Rename(const std::string& from, const std::string& to) override { return cgroups_.Rename(from, to); }
  void Release() override { cgroups_.RemoveParentsIfEmpty(); }

  const Cgroups& cgroups() const { return cgroups_; }

 private:
  NativeRuntime(Cgroups cgroups, UniqueFd init_memfd, std::vector<sock_filter> seccomp)
      : cgroups_(std::move(cgroups)), init_memfd_(std::move(init_memfd)), seccomp_(std::move(seccomp)) {}

  Cgroups cgroups_;
  UniqueFd init_memfd_;               // sealed copy of bulkhead-init (CVE-2019-5736)
  std::vector<sock_filter> seccomp_;  // compiled once
};

// Creates a user namespace, owned by host_id, that maps first_id..first_id+kIdCount-1 onto
// host ids starting at host_id: a sandbox's own (first_id 0), or the idmap that shows stored
// files (first_id kStoredIdBase) with the sandbox's ids.
Result<UniqueFd> CreateUserNamespace(uid_t host_id, uid_t first_id = 0);

// /proc/<pid>/stat field 22, or 0 if the process is gone.
uint64_t ProcessStartTime(pid_t pid);

}  // namespace bulkhead::runtime::native
