#include "oci/ceiling.h"

#include <linux/capability.h>

#include <algorithm>

#include "common/sandbox_caps.h"

namespace bulkhead::oci {

Status CheckCeiling(const Spec& spec) {
  for (const Device& device : spec.devices) {
    const bool allowed = device.type == 'c' && std::any_of(std::begin(kDefaultDevices), std::end(kDefaultDevices),
                                                           [&](const DefaultDevice& d) {
                                                             return int64_t{d.major} == device.major && int64_t{d.minor} == device.minor;
                                                           });
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
