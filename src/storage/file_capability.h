// security.capability values (file capabilities) as the kernel stores them. A v3 value names
// the host uid that is root of the user namespace it applies in ("rootid"); v2 applies to any
// root. Copies and archives move that uid along with the files' owners.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace bulkhead::storage {

constexpr char kCapabilityXattr[] = "security.capability";

// The capability's root uid (0 for v2), or nullopt when `value` is not a v2/v3 capability.
std::optional<uint32_t> CapabilityRoot(const std::string& value);
// True for a v3 value (one that names its root).
bool IsCapabilityV3(const std::string& value);
// `value` (v2 or v3) as a v3 capability whose root is `root`.
std::string CapabilityWithRoot(const std::string& value, uint32_t root);

}  // namespace bulkhead::storage
