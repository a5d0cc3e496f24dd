// The isolation tiers a daemon has, and why it lacks the others.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "runtime/tier.h"

namespace bulkhead::core {

class TierSet {
 public:
  void Add(std::unique_ptr<runtime::Tier> tier);
  // A tier the API names that this host cannot run, and what is missing for it.
  void Lack(const std::string& name, std::string why) { lacking_[name] = std::move(why); }
  // The tier named by a sandbox's "runtime"; 422 runtime_unavailable naming what is missing.
  Result<runtime::Tier*> Find(const std::string& name) const;
  std::vector<runtime::Tier*> All() const;

 private:
  std::map<std::string, std::unique_ptr<runtime::Tier>> tiers_;
  std::map<std::string, std::string> lacking_;
};

}  // namespace bulkhead::core
