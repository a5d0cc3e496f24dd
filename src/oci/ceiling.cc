#include "oci/ceiling.h"

#include <linux/capability.h>

#include <algorithm>
#include <array>

#include "common/sandbox_caps.h"

namespace bulkhead::oci {
namespace {

// The char devices of every container's /dev (container_root.cc makes them; the cgroup allows them).
constexpr std::array<std::pair<int64_t, int64_t>, 8> kDefaultDevices = {
    {{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}}};

}  // namespace

Status CheckCeiling(const Spec& spec) {
  for (const Device& device : spec.devices) {
    bool allowed = device.type == 'c' && std::find(kDefaultDevices.begin(), kDefaultDevices.end(),
                                                   std::make_pair(device.major, device.minor)) != kDefaultDevices.end();
    if (!allowed)
      return MakeError(ErrorCode::kInvalid, "bulkhead gives a container no host device (" + device.path + ", " +
                                                std::string(1, device.type) + " " + std::to_string(device.major) + ":" +
                                                std::to_string(device.minor) + "): privileged pods are not run");
  }
  const uint64_t docker_default = SandboxCapMask() | (uint64_t{1} << CAP_NET_RAW) | (uint64_t{1} << CAP_MKNOD);
  const CapabilitySets& caps = spec.process.capabilities;
  const uint64_t asked = caps.bounding | caps.effective | caps.permitted | caps.ambient | caps.inheritable;
  for (int c = 0; c < 64; c++) {
    if ((asked & ~docker_default) & (uint64_t{1} << c))
      return MakeError(ErrorCode::kInvalid, CapabilityName(c) + " is beyond what bulkhead gives a container");
  }
  return {};
}

}  // namespace bulkhead::oci
