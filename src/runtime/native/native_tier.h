// The native isolation tier: Linux namespaces, an idmapped overlay root, seccomp, trimmed
// capabilities and cgroups. See contain.cc for the steps inside the sandbox, in order.
#pragma once
#include <linux/filter.h>

#include <memory>
#include <string>
#include <vector>

#include "common/id_ranges.h"
#include "common/unique_fd.h"
#include "runtime/cgroup.h"
#include "runtime/tier.h"

namespace bulkhead::runtime::native {

// Every sandbox's /sys: a detached sysfs mount, and the network namespace it shows, which only
// this descriptor keeps alive (native_tier.cc, MakeSharedSysfs). Empty where the kernel cannot
// clone a detached mount.
struct SharedSysfs {
  UniqueFd mount;
  UniqueFd netns;
};

// The sandbox's init listens on <staging>/ctl.sock; its processes share the network namespace
// it was cloned into.
class NativeTier : public Tier {
 public:
  // `tag` names this daemon's cgroup parent; `init_binary` is the static bulkhead-init.
  static Result<std::unique_ptr<NativeTier>> Create(const std::string& tag, const std::string& init_binary);

  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override;
  Result<SandboxHandle> Launch(const LaunchSpec& spec) override;
  std::shared_ptr<const InitDialer> Dialer(const std::string& staging) const override;
  Result<NetworkAttachment> AttachNetwork(const SandboxHandle& handle) override;
  Status SetLimits(const std::string& id, const Limits& limits) override;
  Status Foreground(const std::string& id) override { return cgroups_.SetBackground(id, false); }
  Result<Usage> SandboxUsage(const std::string& id) override;
  Status SetFrozen(const std::string& id, bool frozen) override { return cgroups_.SetFrozen(id, frozen); }
  bool Frozen(const std::string& id) override { return cgroups_.Frozen(id); }
  bool Alive(const SandboxHandle& handle) override;
  Status Destroy(const std::string& id, const SandboxHandle& handle) override;
  std::vector<std::string> Leftovers() override;
  Status Rename(const std::string& from, const std::string& to) override { return cgroups_.Rename(from, to); }
  void Release() override { cgroups_.RemoveParentsIfEmpty(); }

 private:
  NativeTier(Cgroups cgroups, UniqueFd init_memfd, std::vector<sock_filter> seccomp, SharedSysfs sysfs)
      : cgroups_(std::move(cgroups)),
        init_memfd_(std::move(init_memfd)),
        seccomp_(std::move(seccomp)),
        sysfs_(std::move(sysfs)) {}

  const std::string name_ = "native";

  Cgroups cgroups_;
  UniqueFd init_memfd_;               // sealed copy of bulkhead-init (CVE-2019-5736)
  std::vector<sock_filter> seccomp_;  // compiled once
  SharedSysfs sysfs_;
};

}  // namespace bulkhead::runtime::native
