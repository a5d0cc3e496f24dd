// The isolation tiers a daemon has, and why it lacks the others.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "runtime/tier.h"

namespace bulkhead::core {

// A runtime the API names, as /healthz shows it.
struct RuntimeInfo {
  std::string name;
  bool available = false;
  std::string why;  // what is missing, when not available
  std::vector<std::pair<std::string, std::string>> details;  // Tier::Details
  bool memory_snapshots = false;  // Capabilities::memory_snapshot
};

class TierSet {
 public:
  void Add(std::unique_ptr<runtime::Tier> tier);
  // A tier the API names that this host cannot run, and what is missing for it.
  void Lack(const std::string& name, std::string why) { lacking_[name] = std::move(why); }
  // The tier named by a sandbox's "runtime"; 422 runtime_unavailable naming what is missing.
  Result<runtime::Tier*> Find(const std::string& name) const;
  std::vector<runtime::Tier*> All() const;
  // Every tier, available or lacking, by name.
  std::vector<RuntimeInfo> Describe() const;
  // The names of the tiers that take memory snapshots, for messages ("gvisor, microvm"; "" if none).
  std::string WithMemorySnapshots() const;

 private:
  std::map<std::string, std::unique_ptr<runtime::Tier>> tiers_;
  std::map<std::string, std::string> lacking_;
};

}  // namespace bulkhead::core
