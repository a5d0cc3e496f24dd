#include "storage/file_capability.h"

#include <endian.h>

#include <cstring>

namespace bulkhead::storage {
namespace {

// Layout: magic_etc, 2 x (permitted, inheritable), [rootid]; little-endian.
constexpr uint32_t kRevisionMask = 0xFF000000;
constexpr uint32_t kRevision2 = 0x02000000;
constexpr uint32_t kRevision3 = 0x03000000;
constexpr uint32_t kFlagsEffective = 0x000001;
constexpr size_t kSizeV2 = 20;
constexpr size_t kSizeV3 = 24;

uint32_t LoadLe32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return le32toh(v);
}

}  // namespace

std::optional<uint32_t> CapabilityRoot(const std::string& value) {
  if (value.size() < 4) return std::nullopt;
  uint32_t revision = LoadLe32(value, 0) & kRevisionMask;
  if (revision == kRevision2 && value.size() == kSizeV2) return 0;
  if (revision == kRevision3 && value.size() == kSizeV3) return LoadLe32(value, 20);
  return std::nullopt;
}

bool IsCapabilityV3(const std::string& value) {
  return value.size() == kSizeV3 && (LoadLe32(value, 0) & kRevisionMask) == kRevision3;
}

std::string CapabilityWithRoot(const std::string& value, uint32_t root) {
  std::string out(kSizeV3, '\0');
  uint32_t magic = htole32(kRevision3 | (LoadLe32(value, 0) & kFlagsEffective));
  uint32_t rootid = htole32(root);
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, value.data() + 4, 16);
  std::memcpy(out.data() + 20, &rootid, 4);
  return out;
}

}  // namespace bulkhead::storage
