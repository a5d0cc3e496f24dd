// Host uid ranges: each sandbox's ids 0..kIdCount-1 are a range of unprivileged host ids that
// no other sandbox on this host uses, even one of another daemon. Its files are stored owned
// by them (storage) and its processes run as them (the tier's user namespace): a host
// resource of every tier, so the core claims them. Ranges are claimed by creating
// /run/bulkhead/uid-ranges/<slot>.
#pragma once
#include <sys/types.h>

#include <set>
#include <string>

#include "common/id_ranges.h"
#include "common/result.h"

namespace bulkhead::runtime {

constexpr int kSlots = 0xe000;  // ranges from kFirstHostId up to ~0xfe000000

class UidRanges {
 public:
  explicit UidRanges(std::string owner) : owner_(std::move(owner)) {}
  // Claims a free range for `sandbox_id` and returns its first host uid.
  Result<uid_t> Claim(const std::string& sandbox_id);
  // Claims the given range again after a restart (no-op when we still hold it).
  Status Reclaim(uid_t base, const std::string& sandbox_id);
  void Release(uid_t base);
  // After a restart: frees every range this daemon holds for a sandbox not in `sandbox_ids`
  // (a create killed between its claim and its row left one).
  void ReleaseAllBut(const std::set<std::string>& sandbox_ids);

 private:
  std::string owner_;  // the daemon's state dir: who holds a slot
  int next_ = 0;
};

}  // namespace bulkhead::runtime
