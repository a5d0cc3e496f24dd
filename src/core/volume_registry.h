// The named volumes of one daemon: their rows in the state database, their directories in
// storage, and which sandboxes list them (a volume is in use from the moment a sandbox that
// lists it is made until that sandbox is deleted, whatever its state). Each tenant has its
// own names (storage::VolumeKey; tenant "" is the host's), and a sandbox mounts its own
// tenant's volumes only. Thread-safe.
#pragma once
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/types.h"
#include "runtime/tier.h"
#include "storage/storage.h"
#include "store/state_db.h"

namespace bulkhead::core {

class VolumeRegistry {
 public:
  VolumeRegistry(store::StateDb& db, storage::Storage& storage) : db_(db), storage_(storage) {}

  // Loads the volumes, dropping what a crash left half-made: a row whose directory is
  // missing, a directory without a row. (blocking)
  Status Recover();

  // 409 volume_exists if the name is taken in its tenant. (blocking)
  Result<VolumeInfo> Create(const storage::VolumeKey& key, int64_t size_mb);
  Result<VolumeInfo> Get(const storage::VolumeKey& key) const;  // 404 volume_not_found
  std::vector<VolumeInfo> List() const;                          // every tenant's
  // 409 volume_in_use while a sandbox lists it; the data goes with it. (blocking)
  Status Delete(const storage::VolumeKey& key);
  // How many volumes the tenant has (being made too), and their size caps summed.
  std::pair<int64_t, int64_t> UsageOf(const std::string& tenant) const;
  std::set<std::string> Tenants() const;  // those with a volume ("" for the host's)

  // Records that sandbox `sandbox_id` of `tenant` mounts `mounts` (that tenant's volumes)
  // and returns the binds to give its runtime. 404 volume_not_found (nothing recorded) if
  // one does not exist. Calling it again for the same sandbox (a restart of a stopped one)
  // is fine.
  Result<std::vector<runtime::VolumeBind>> Acquire(const std::string& sandbox_id, const std::string& tenant,
                                                   const std::vector<VolumeMount>& mounts);
  // After a daemon restart: a sandbox that survived still holds its volumes.
  void Attach(const std::string& sandbox_id, const std::string& tenant, const std::vector<VolumeMount>& mounts);
  // The sandbox is gone: it holds no volume any more. Its volumes' data is untouched.
  void Release(const std::string& sandbox_id);

 private:
  struct Entry {
    store::VolumeRow row;
    std::set<std::string> users;  // sandbox ids
    bool creating = false;  // its name is taken and it counts for UsageOf; nothing else sees it yet
    bool deleting = false;
  };
  static Error NotFound(const storage::VolumeKey& key);
  // used_bytes is read outside the lock (a tree walk without quotas).
  VolumeInfo InfoOf(const store::VolumeRow& row, const std::set<std::string>& users) const;

  store::StateDb& db_;
  storage::Storage& storage_;
  mutable std::mutex mu_;
  std::map<storage::VolumeKey, Entry> volumes_;
};

}  // namespace bulkhead::core
