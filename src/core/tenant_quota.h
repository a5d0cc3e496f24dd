// A tenant's quotas and usage: how much of the host its sandboxes, snapshots, volumes and images
// may hold at once (sandboxes running, their CPUs, memory and disk, snapshots and their bytes,
// volumes and their size caps, images and their bytes) and how fast it may create sandboxes.
// The manager checks them on every create, fork, start or resume from disk, and snapshot of a
// tenant's sandbox, and every create of its volumes (kTooMany, 429 "quota_exceeded", naming the
// quota) before anything is made; an image's size is known once it is stored, so one that
// passes a quota is let go again (core/quotas.cc). Plain logic
// (tests/unit/core_tenant_quota_test.cc).
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::core {

enum class Resource {
  kSandboxes,         // running ones: starting, running, or paused with their memory held
  kCpus,              // the CPU limits of those
  kMemoryMb,          // their memory limits
  kDiskMb,            // the disk caps of all its sandboxes, stopped and paused ones too
  kSnapshots,
  kSnapshotBytes,     // files and memory images of its snapshots
  kCreatesPerMinute,  // sandboxes created (forks and creates from snapshots too) in the last 60 s
  kVolumes,           // named volumes
  kVolumeMb,          // their size caps
  kImages,            // images it holds (pulled, built, imported with its keys)
  kImageBytes,        // their sizes (an image others hold too counts for each)
};
inline constexpr size_t kResources = 11;

struct ResourceName {
  std::string_view key;   // in the API's "quotas" and "usage" objects, and in /metrics
  std::string_view what;  // in a refusal's message
};
const ResourceName& NameOf(Resource resource);
inline constexpr std::array<Resource, kResources> kAllResources = {
    Resource::kSandboxes, Resource::kCpus,          Resource::kMemoryMb,        Resource::kDiskMb,
    Resource::kSnapshots, Resource::kSnapshotBytes, Resource::kCreatesPerMinute, Resource::kVolumes,
    Resource::kVolumeMb,  Resource::kImages,        Resource::kImageBytes};

// An amount of each resource: a tenant's usage, or what a call would add to it.
struct Amounts {
  std::array<double, kResources> value{};
  double& operator[](Resource r) { return value[static_cast<size_t>(r)]; }
  double operator[](Resource r) const { return value[static_cast<size_t>(r)]; }
};

// A tenant's limits; an unset one is no limit (the host's own limits still hold).
struct TenantQuota {
  std::array<std::optional<double>, kResources> limit;
  std::optional<double>& operator[](Resource r) { return limit[static_cast<size_t>(r)]; }
  const std::optional<double>& operator[](Resource r) const { return limit[static_cast<size_t>(r)]; }
  bool Empty() const;
};

// OK when `usage` plus `need` stays within `quota` for every resource `need` asks for; else
// kTooMany "quota_exceeded" naming the first quota it would pass.
Status CheckQuota(const std::string& tenant, const TenantQuota& quota, const Amounts& usage, const Amounts& need);

// {"sandboxes": 5, "cpus": 4, ...}: the limits that are set.
nlohmann::json QuotaToJson(const TenantQuota& quota);
nlohmann::json AmountsToJson(const Amounts& amounts);
// `quota` with the fields of `patch` applied: a number sets that limit, null removes it. 422
// for an unknown field, a value that is not a number, a negative or fractional count, or one
// past kMaxLimit.
Result<TenantQuota> PatchQuota(TenantQuota quota, const nlohmann::json& patch);
inline constexpr double kMaxLimit = 1e15;

}  // namespace bulkhead::core
