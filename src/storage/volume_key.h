// The key of a named volume: its tenant ("" for the host's) and its name, unique within that
// tenant.
#pragma once
#include <compare>
#include <string>

namespace bulkhead::storage {

struct VolumeKey {
  std::string tenant;
  std::string name;
  auto operator<=>(const VolumeKey&) const = default;
};

}  // namespace bulkhead::storage
