#include "support/fake_manager.h"

#include <algorithm>
#include <fstream>
#include <iterator>

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::testing {

namespace asio = boost::asio;

namespace {

constexpr const char* kCreatedAt = "2024-05-01T10:00:00Z";

}  // namespace

FakeManager::FakeManager() {
  images_.push_back(core::ImageInfo{.name = "host", .source = "host", .created_at = "2024-01-01T00:00:00Z"});
}

Error FakeManager::NotFound(const std::string& id) {
  return MakeError(ErrorCode::kNotFound, "no sandbox " + id, "sandbox_not_found");
}

Error FakeManager::Unreachable(const std::string& id) {
  return MakeError(ErrorCode::kUnavailable, "the init of sandbox " + id + " is not scripted", "sandbox_unreachable");
}

core::SandboxInfo& FakeManager::Insert(const std::string& id, const core::SandboxSpec& spec) {
  core::SandboxInfo& info = sandboxes_[id];
  info.id = id;
  info.state = "running";
  info.spec = spec;
  info.created_at = kCreatedAt;
  if (spec.timeout_s > 0) info.expires_at = "2024-05-01T10:05:00Z";
  info.parent_snapshot = spec.from_snapshot;
  return info;
}

void FakeManager::AddSandbox(const std::string& id, const core::SandboxSpec& spec) {
  std::lock_guard lock(mutex_);
  Insert(id, spec);
}

void FakeManager::AddImage(const std::string& name) {
  std::lock_guard lock(mutex_);
  images_.push_back(core::ImageInfo{.name = name, .source = "directory", .created_at = kCreatedAt});
}

void FakeManager::AddSnapshot(const core::SnapshotInfo& snapshot) {
  std::lock_guard lock(mutex_);
  snapshots_.push_back(snapshot);
}

Result<core::SandboxInfo> FakeManager::Create(const core::SandboxSpec& spec) {
  std::lock_guard lock(mutex_);
  const bool known = std::any_of(images_.begin(), images_.end(), [&](const auto& i) { return i.name == spec.image; });
  if (!known && !spec.image.empty()) {
    return MakeError(ErrorCode::kNotFound, "no image " + spec.image, "image_not_found");
  }
  last_spec = spec;
  ++stats_.sandboxes_created_total;
  return Insert("sb-" + std::to_string(++next_sandbox_), spec);
}

Result<core::SandboxInfo> FakeManager::Get(const std::string& id) {
  if (id == "throws") throw std::runtime_error("boom");  // a bug in the core
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound(id);
  core::SandboxInfo info = it->second;
  info.usage = usage;
  return info;
}

std::optional<std::string> FakeManager::TenantOf(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return std::nullopt;
  return it->second.spec.tenant;
}

std::vector<core::SandboxInfo> FakeManager::List(const core::ListFilter& filter) {
  std::lock_guard lock(mutex_);
  std::vector<core::SandboxInfo> out;
  for (const auto& [id, info] : sandboxes_) {
    if (filter.id && id != *filter.id) continue;
    if (filter.state && info.state != *filter.state) continue;
    bool match = true;
    for (const auto& [key, value] : filter.metadata) {
      auto it = info.spec.metadata.find(key);
      match = match && it != info.spec.metadata.end() && it->second == value;
    }
    if (match) out.push_back(info);
  }
  return out;
}

Status FakeManager::Delete(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (sandboxes_.erase(id) == 0) return NotFound(id);
  return {};
}

Result<core::SandboxInfo> FakeManager::SetTimeout(const std::string& id, int64_t timeout_s) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound(id);
  it->second.spec.timeout_s = timeout_s;
  it->second.expires_at = "2024-05-01T11:00:00Z";
  return it->second;
}

Result<core::SandboxInfo> FakeManager::SetState(const std::string& id, const std::string& state) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound(id);
  it->second.state = state;
  return it->second;
}

asio::awaitable<Result<std::unique_ptr<core::ExecSession>>> FakeManager::StartExec(asio::any_io_executor executor,
                                                                                     const std::string& id,
                                                                                     core::ExecRequest request) {
  {
    std::lock_guard lock(mutex_);
    if (!sandboxes_.contains(id)) co_return NotFound(id);
    last_exec = request;
  }
  if (!exec_init) co_return Unreachable(id);
  LocalSocket daemon_end = SpawnInit(executor, [script = exec_init, request = std::move(request)](LocalSocket socket) {
    return script(std::move(socket), request);
  });
  co_return std::make_unique<core::ExecSession>(std::move(daemon_end));
}

asio::awaitable<Result<core::InitConnection>> FakeManager::ConnectInit(asio::any_io_executor executor,
                                                                       const std::string& id) {
  core::SandboxSpec spec;
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) co_return NotFound(id);
    spec = it->second.spec;
  }
  if (!connect_init) co_return Unreachable(id);
  LocalSocket daemon_end = SpawnInit(executor, [script = connect_init, id](LocalSocket socket) {
    return script(std::move(socket), id);
  });
  co_return core::InitConnection{std::make_unique<core::CtlClient>(std::move(daemon_end)), spec, nullptr};
}

Result<core::SandboxInfo> FakeManager::SetNetwork(const std::string& id, const core::NetworkPolicy& policy) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound(id);
  it->second.spec.network = policy;
  return it->second;
}

Result<std::vector<net::EgressRecord>> FakeManager::Egress(const std::string& id, int64_t limit) {
  std::lock_guard lock(mutex_);
  if (!sandboxes_.contains(id)) return NotFound(id);
  last_egress_limit = limit;
  return egress;
}

std::vector<core::ImageInfo> FakeManager::ListImages() {
  std::lock_guard lock(mutex_);
  return images_;
}

Result<core::ImageInfo> FakeManager::ImportImage(const std::string& name, const std::string& tar_path,
                                                 const std::string&) {
  std::ifstream file(tar_path, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::lock_guard lock(mutex_);
  imported[name] = content;
  imported_from = tar_path;
  core::ImageInfo image{.name = name, .source = "tarball", .created_at = kCreatedAt,
                        .size_bytes = int64_t(content.size())};
  std::erase_if(images_, [&](const auto& i) { return i.name == name; });
  images_.push_back(image);
  return image;
}

Result<core::ImageInfo> FakeManager::FindImage(const std::string& name, const std::string&) {
  std::lock_guard lock(mutex_);
  for (const auto& image : images_)
    if (image.name == name) return image;
  return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
}

// Pulls nothing: a pulled image of the reference's name appears, after one progress event.
Result<core::ImageInfo> FakeManager::PullImage(const storage::PullRequest& request,
                                               const storage::PullListener& listener) {
  listener(nlohmann::json{{"status", "resolving"}, {"image", request.ref.ToString()}});
  core::ImageInfo image{.name = std::string(64, 'a'), .source = "registry", .created_at = kCreatedAt};
  image.references = {request.ref.ToString()};
  std::lock_guard lock(mutex_);
  images_.push_back(image);
  return image;
}

Status FakeManager::DeleteImage(const std::string& name, const std::string&) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(images_.begin(), images_.end(), [&](const auto& i) { return i.name == name; });
  if (it == images_.end()) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  for (const auto& [id, info] : sandboxes_) {
    if (info.spec.image == name) return MakeError(ErrorCode::kConflict, "image " + name + " is in use");
  }
  images_.erase(it);
  return {};
}

Result<core::VolumeInfo> FakeManager::CreateVolume(const storage::VolumeKey& key, int64_t size_mb) {
  std::lock_guard lock(mutex_);
  if (volumes_.contains(key)) return MakeError(ErrorCode::kConflict, "volume " + key.name + " exists", "volume_exists");
  return volumes_[key] =
             core::VolumeInfo{.name = key.name, .tenant = key.tenant, .size_mb = size_mb, .created_at = kCreatedAt};
}

Result<core::VolumeInfo> FakeManager::GetVolume(const storage::VolumeKey& key) {
  std::lock_guard lock(mutex_);
  auto it = volumes_.find(key);
  if (it == volumes_.end()) return MakeError(ErrorCode::kNotFound, "no volume named " + key.name, "volume_not_found");
  core::VolumeInfo volume = it->second;
  for (const auto& [id, info] : sandboxes_) {
    for (const auto& mount : info.spec.volumes) {
      if (mount.name == key.name && info.spec.tenant == key.tenant) volume.mounted_by.push_back(id);
    }
  }
  return volume;
}

std::vector<core::VolumeInfo> FakeManager::ListVolumes() {
  std::vector<storage::VolumeKey> keys;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, volume] : volumes_) keys.push_back(key);
  }
  std::vector<core::VolumeInfo> out;
  for (const auto& key : keys) {
    if (auto volume = GetVolume(key); volume.ok()) out.push_back(*volume);
  }
  return out;
}

Status FakeManager::DeleteVolume(const storage::VolumeKey& key) {
  auto volume = GetVolume(key);
  if (!volume.ok()) return volume.error();
  if (!volume->mounted_by.empty()) {
    return MakeError(ErrorCode::kConflict, "volume " + key.name + " is mounted", "volume_in_use");
  }
  std::lock_guard lock(mutex_);
  volumes_.erase(key);
  return {};
}

Result<core::SnapshotInfo> FakeManager::CreateSnapshot(const std::string& id, const std::string& name, bool memory) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound(id);
  last_snapshot_name = name;
  last_snapshot_memory = memory;
  std::string snapshot_id;
  do {
    snapshot_id = "snap_" + std::to_string(++next_snapshot_);
  } while (std::any_of(snapshots_.begin(), snapshots_.end(), [&](const auto& s) { return s.id == snapshot_id; }));
  snapshots_.push_back(
      core::SnapshotInfo{snapshot_id, name, id, kCreatedAt, 4096, it->second.spec.image, memory, it->second.spec.runtime});
  return snapshots_.back();
}

std::vector<core::SnapshotInfo> FakeManager::ListSnapshots() {
  std::lock_guard lock(mutex_);
  return snapshots_;
}

Result<core::SnapshotInfo> FakeManager::GetSnapshot(const std::string& id) {
  std::lock_guard lock(mutex_);
  for (const auto& snapshot : snapshots_) {
    if (snapshot.id == id) return snapshot;
  }
  return MakeError(ErrorCode::kNotFound, "no snapshot " + id, "snapshot_not_found");
}

Status FakeManager::DeleteSnapshot(const std::string& id) {
  BH_TRY(GetSnapshot(id));
  std::lock_guard lock(mutex_);
  for (const auto& [sandbox_id, info] : sandboxes_) {
    if (info.parent_snapshot == id) {
      return MakeError(ErrorCode::kConflict, "snapshot " + id + " is in use by " + sandbox_id, "snapshot_in_use");
    }
  }
  std::erase_if(snapshots_, [&](const auto& s) { return s.id == id; });
  return {};
}

Status FakeManager::ExportSnapshot(const std::string& id, int) {
  BH_TRY(GetSnapshot(id));
  return MakeError(ErrorCode::kUnavailable, "the fake manager writes no archives");
}

Result<core::SnapshotInfo> FakeManager::ImportSnapshot(int, int64_t, bool) {
  return MakeError(ErrorCode::kInvalid, "not a bulkhead snapshot archive", "invalid_snapshot");
}

Result<std::vector<core::SandboxInfo>> FakeManager::Fork(const std::string& id, int count, bool memory) {
  std::lock_guard lock(mutex_);
  last_fork_memory = memory;
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound(id);
  const core::SandboxSpec spec = it->second.spec;
  std::vector<core::SandboxInfo> forks;
  for (int i = 0; i < count; ++i) forks.push_back(Insert("sb-" + std::to_string(++next_sandbox_), spec));
  return forks;
}

core::ManagerStats FakeManager::Stats() {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace bulkhead::testing
