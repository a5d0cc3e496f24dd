// Host uid ranges for user namespaces: each sandbox maps its uids 0..kIdCount-1 onto a
// range of unprivileged host uids that no other sandbox on this host uses, even one of
// another daemon. Ranges are claimed by creating /run/bulkhead/uid-ranges/<slot>.
#pragma once
#include <sys/types.h>

#include <string>

#include "common/id_ranges.h"
#include "common/result.h"

namespace bulkhead::runtime::native {

constexpr int kSlots = 0xe000;  // ranges from kFirstHostId up to ~0xfe000000

class UidRanges {
 public:
  explicit UidRanges(std::string owner) : owner_(std::move(owner)) {}
  // Claims a free range for `sandbox_id` and returns its first host uid.
  Result<uid_t> Claim(const std::string& sandbox_id);
  // Claims the given range again after a restart (no-op when we still hold it).
  Status Reclaim(uid_t base, const std::string& sandbox_id);
  void Release(uid_t base);

 private:
  std::string owner_;  // the daemon's state dir: who holds a slot
  int next_ = 0;
};

}  // namespace bulkhead::runtime::native
