// Warm pools of images other than the host's (--warm-pool IMAGE=N): the configured name is
// resolved to the stored image it names whenever that may change, so that a pool follows a
// tag pulled anew and goes with an image deleted.
#include <spdlog/spdlog.h>

#include "core/manager_impl.h"
#include "storage/fs_util.h"
#include "storage/image_ref.h"

namespace bulkhead::core {

void SandboxManagerImpl::PrepareImagePools() {
  for (const DaemonConfig::ImagePool& pool : config_.image_warm_pools) {
    if (stopping_) return;
    const std::string runtime = pool.runtime.empty() ? config_.default_runtime : pool.runtime;
    if (auto tier = tiers_.Find(runtime); !tier || !(*tier)->capabilities().pooling) {
      spdlog::warn("warm pool of image {}: the {} runtime {} here", pool.image, runtime,
                   tier ? "keeps no warm pools" : "is not available");
      continue;
    }
    if (storage_->ResolveImage(pool.image, config_.registry.default_registry, "").ok()) continue;
    if (!storage::IsRegistryReference(pool.image) && config_.registry.default_registry.empty()) {
      spdlog::warn("warm pool of image {}: no such image is stored; its pool fills once it is imported", pool.image);
      continue;
    }
    storage::PullRequest request;
    auto ref = storage::ParseImageRef(pool.image, config_.registry.default_registry);
    if (!ref.ok()) {
      spdlog::warn("warm pool of image {}: {}", pool.image, ref.error().message);
      continue;
    }
    request.ref = *ref;
    request.platform = storage::HostPlatform();
    spdlog::info("warm pool of image {}: pulling it", pool.image);
    auto pulled = puller_.Pull(request, [](const nlohmann::json&) {});
    if (!pulled.ok()) spdlog::warn("warm pool of image {}: the pull failed: {}", pool.image, pulled.error().message);
  }
  RetargetImagePools();
}

void SandboxManagerImpl::RetargetImagePools() {
  if (config_.image_warm_pools.empty() || stopping_) return;
  std::lock_guard retargeting(image_pools_mu_);
  std::map<PoolKey, int> wanted;
  for (const DaemonConfig::ImagePool& pool : config_.image_warm_pools) {
    const std::string runtime = pool.runtime.empty() ? config_.default_runtime : pool.runtime;
    auto tier = tiers_.Find(runtime);
    if (!tier || !(*tier)->capabilities().pooling) continue;  // (Start refused an unknown runtime)
    auto stored = storage_->ResolveImage(pool.image, config_.registry.default_registry, "");
    if (!stored.ok()) continue;
    int& target = wanted[PoolKey{runtime, *stored, ""}];
    target = std::max(target, pool.count);
  }
  std::vector<std::shared_ptr<Sandbox>> cold;
  {
    std::lock_guard lock(mu_);
    for (const PoolKey& key : image_pool_keys_) {
      if (wanted.contains(key)) continue;
      for (auto& sb : pools_.SetTarget(key, 0)) cold.push_back(std::move(sb));
    }
    image_pool_keys_.clear();
    for (const auto& [key, target] : wanted) {
      for (auto& sb : pools_.SetTarget(key, target)) cold.push_back(std::move(sb));
      image_pool_keys_.insert(key);
    }
  }
  wake_.notify_all();
  for (const auto& sb : cold) (void)Teardown(*sb);
}

std::vector<std::shared_ptr<Sandbox>> SandboxManagerImpl::ColdImageLocked(const std::string& image) {
  std::vector<std::shared_ptr<Sandbox>> cold;
  for (auto it = image_pool_keys_.begin(); it != image_pool_keys_.end();) {
    if (it->image != image) {
      ++it;
      continue;
    }
    for (auto& sb : pools_.SetTarget(*it, 0)) cold.push_back(std::move(sb));
    it = image_pool_keys_.erase(it);
  }
  return cold;
}

Result<ImageInfo> SandboxManagerImpl::PullImage(const storage::PullRequest& request,
                                                const storage::PullListener& listener) {
  const std::map<std::string, int64_t> before = ImagesHeldBy(request.tenant);
  auto pulled = puller_.Pull(request, listener);
  if (!pulled.ok()) return pulled;
  BH_TRY(KeepImagesWithinQuota(request.tenant, before));
  RetargetImagePools();  // a tag that moved moves its pool
  return storage::ImageSeenBy(std::move(*pulled), request.tenant);
}

Result<ImageInfo> SandboxManagerImpl::StoreBuiltImage(const storage::BuiltImage& image, const std::string& tar_path,
                                                      const std::string& name, const std::string& tenant) {
  if (!name.empty()) {
    // The host's imports are named by their directory; a tenant's by a reference of its own.
    bool imported = tenant.empty() && storage_->ImageExists(name);
    if (auto own = storage_->OwnReference(name, tenant); own.ok()) {
      auto info = storage_->GetImage(*own);
      imported = imported || (info.ok() && info->source != "build");
    }
    if (name == "host" || imported)
      return MakeError(ErrorCode::kConflict, "image " + name + " exists and was not built: choose another name",
                       "image_exists");
    if (!storage::IsSafeName(name))
      return MakeError(ErrorCode::kInvalid, "invalid image name (letters, digits, . _ -): " + name);
  }
  const std::map<std::string, int64_t> before = ImagesHeldBy(tenant);
  auto stored = storage_->InstallBuiltImage(image, tar_path, tenant);
  if (!stored.ok()) return stored;
  auto named = storage_->NameImage(stored->name, name, tenant);  // (a cached build's image: now the tenant's too)
  if (!named.ok()) return named;
  BH_TRY(KeepImagesWithinQuota(tenant, before));
  if (!name.empty()) RetargetImagePools();
  return storage::ImageSeenBy(std::move(*named), tenant);
}

Result<ImageInfo> SandboxManagerImpl::ImportImage(const std::string& name, const std::string& tar_path,
                                                  const std::string& tenant) {
  const std::map<std::string, int64_t> before = ImagesHeldBy(tenant);
  auto imported = storage_->ImportImage(name, tar_path, tenant);
  if (!imported.ok()) return imported;
  BH_TRY(KeepImagesWithinQuota(tenant, before));
  RetargetImagePools();
  return storage::ImageSeenBy(std::move(*imported), tenant);
}

}  // namespace bulkhead::core
