#include "storage/storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <ctime>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "storage/fs_util.h"
#include "storage/host_image.h"
#include "storage/blob_store.h"
#include "storage/image_import.h"
#include "storage/image_ref.h"
#include "storage/layer_area.h"
#include "common/time_format.h"

namespace bulkhead::storage {
namespace {

constexpr char kHostImage[] = "host";
constexpr char kTmpMarker[] = ".tmp-";  // in-flight imports and deletes: images/<name>.tmp-XXXXXX

bool IsValidImageName(const std::string& name) {
  return IsSafeName(name) && name.find(kTmpMarker) == std::string::npos;
}

std::vector<std::string> ListDirNames(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string MtimeRfc3339(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {};
  return Rfc3339(st.st_mtime);
}

// meta.json is the daemon's own file, but a field of the wrong type must not throw.
template <typename T>
T Field(const nlohmann::json& object, const char* key, T fallback) {
  auto it = object.find(key);
  if (it == object.end()) return fallback;
  T value = fallback;
  try {
    it->get_to(value);
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
  return value;
}

ImageConfig ImageConfigFromJson(const nlohmann::json& j) {
  ImageConfig c;
  c.os = Field<std::string>(j, "os", "");
  c.architecture = Field<std::string>(j, "architecture", "");
  c.env = Field<std::vector<std::string>>(j, "env", {});
  c.working_dir = Field<std::string>(j, "working_dir", "");
  c.user = Field<std::string>(j, "user", "");
  c.entrypoint = Field<std::vector<std::string>>(j, "entrypoint", {});
  c.cmd = Field<std::vector<std::string>>(j, "cmd", {});
  c.exposed_ports = Field<std::vector<std::string>>(j, "exposed_ports", {});
  c.labels = Field<std::map<std::string, std::string>>(j, "labels", {});
  return c;
}

Result<nlohmann::json> ReadMetaJson(const std::string& image_dir) {
  auto text = ReadFile(image_dir + "/meta.json");
  if (!text.ok()) return text.error();
  auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return MakeError(ErrorCode::kInternal, "bad meta.json in " + image_dir);
  return json;
}

ImageInfo ImageInfoFromMeta(const nlohmann::json& json) {
  ImageInfo info;
  info.name = Field<std::string>(json, "name", "");
  info.source = Field<std::string>(json, "source", "");
  info.created_at = Field<std::string>(json, "created_at", "");
  info.size_bytes = Field<int64_t>(json, "size_bytes", 0);
  info.digest = Field<std::string>(json, "digest", "");
  info.references = Field<std::vector<std::string>>(json, "references", {});
  if (auto c = json.find("config"); c != json.end() && c->is_object()) info.config = ImageConfigFromJson(*c);
  info.host_base = Field<bool>(json, "host_base", false);
  info.shared = Field<bool>(json, "host", true);  // (images stored before tenants held any: the host's)
  info.tenants = Field<std::map<std::string, std::vector<std::string>>>(json, "tenants", {});
  return info;
}

// Who holds an image, as meta.json keeps it (ImageInfo's `references`, `shared`, `tenants`).
void PutHolders(nlohmann::json& meta, const ImageInfo& info) {
  meta["references"] = info.references;
  meta["host"] = info.shared;
  meta["tenants"] = info.tenants;
}

// The holders a new image starts with: the one that stored it, with a tenant's name for it if
// it gave one (its import's).
nlohmann::json FirstHolder(const std::string& tenant, const std::string& reference = "") {
  nlohmann::json tenants = nlohmann::json::object();
  if (!tenant.empty()) tenants[tenant] = reference.empty() ? nlohmann::json::array() : nlohmann::json::array({reference});
  return {{"references", nlohmann::json::array()}, {"host", tenant.empty()}, {"tenants", std::move(tenants)}};
}

std::vector<std::string>& ReferencesOf(ImageInfo& info, const std::string& tenant) {
  return tenant.empty() ? info.references : info.tenants[tenant];
}

Result<ImageInfo> ReadImageMeta(const std::string& image_dir) {
  auto json = ReadMetaJson(image_dir);
  if (!json.ok()) return json.error();
  return ImageInfoFromMeta(*json);
}

// A tree stored by an older version, owned by host ids 0..65535 (so an image's setuid-root
// files were host root's): its owners move to the stored range. The root goes last, so an
// interrupted move (it touches only ids below kIdCount) is finished at the next start.
Status MoveToStoredIds(const std::string& root) {
  struct stat st;
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid >= kIdCount) return {};
  spdlog::info("storage: moving the owners of {} to the stored id range", root);
  return ShiftOwners(root, {0, kStoredIdBase, kIdCount});
}

Status CheckLayerId(const std::string& sandbox_id) {
  if (!IsSafeName(sandbox_id)) return MakeError(ErrorCode::kInvalid, "invalid sandbox id for a layer: " + sandbox_id);
  return {};
}

}  // namespace

Storage::Storage(std::string state_dir, std::unique_ptr<LayerArea> layers, std::unique_ptr<BlobStore> blobs)
    : state_dir_(std::move(state_dir)),
      layers_(std::move(layers)),
      blobs_(std::move(blobs)),
      host_bind_dirs_(storage::HostBindDirs()) {}

Storage::~Storage() = default;

Result<std::unique_ptr<Storage>> Storage::Open(const std::string& state_dir, int64_t size_gb,
                                               const std::string& driver) {
  if (::mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + state_dir, errno);
  char resolved[PATH_MAX];
  if (::realpath(state_dir.c_str(), resolved) == nullptr) return SystemError("realpath " + state_dir, errno);
  std::string root = resolved;
  BH_TRY(MakeDir(root + "/images", 0700));
  // Imports and deletes that a crash interrupted.
  for (const auto& name : ListDirNames(root + "/images")) {
    if (name.find(kTmpMarker) != std::string::npos) (void)RemoveTree(root + "/images/" + name);
  }
  auto layers = OpenLayerArea(root, size_gb, driver);
  if (!layers.ok()) return layers.error();
  BH_TRY(MakeDir((*layers)->snapshots_root(), 0700));
  BH_TRY(MakeDir(root + "/memory", 0700));
  for (const auto& name : ListDirNames(root + "/images")) {
    if (name != kHostImage && IsValidImageName(name)) BH_TRY(MoveToStoredIds(root + "/images/" + name + "/rootfs"));
  }
  for (const auto& name : ListDirNames((*layers)->root())) {
    if (name.starts_with(kVolumeLayerPrefix)) BH_TRY(MoveToStoredIds((*layers)->LayerPath(name) + "/data"));
  }
  auto blobs = BlobStore::Open(root + "/blobs");
  if (!blobs.ok()) return blobs.error();
  spdlog::info("storage: state {}, layers in {} (driver: {}, quota: {})", root, (*layers)->root(),
               (*layers)->driver(), (*layers)->backend());
  return std::unique_ptr<Storage>(new Storage(root, std::move(*layers), std::move(*blobs)));
}

std::string Storage::ImagesDir() const { return state_dir_ + "/images"; }
std::string Storage::HostImageDir() const { return ImagesDir() + "/" + kHostImage; }
std::string Storage::LayerDir(const std::string& sandbox_id) const { return layers_->LayerPath(sandbox_id); }

// ---- images ----

Result<std::string> Storage::EnsureHostImage(const std::string& sudo_binary) {
  std::lock_guard lock(images_mu_);
  return EnsureHostImageAt(HostImageDir(), state_dir_, sudo_binary);
}

std::vector<std::string> Storage::HostBindDirs() const { return host_bind_dirs_; }

bool Storage::ImageExists(const std::string& name) const { return ImageRootfs(name).ok(); }

Result<std::string> Storage::ImageRootfs(const std::string& name) const {
  if (!IsValidImageName(name)) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  // For "host" this resolves the current-version symlink to the version directory.
  char resolved[PATH_MAX];
  std::string path = ImagesDir() + "/" + name + "/rootfs";
  struct stat st;
  if (::realpath(path.c_str(), resolved) == nullptr || ::stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  }
  return std::string(resolved);
}

Result<ImageInfo> Storage::InstallImage(const std::string& name,
                                        const std::function<Status(const std::string& rootfs)>& fill,
                                        const std::function<nlohmann::json(ImageInfo&)>& meta, bool existing_ok) {
  std::string final_dir = ImagesDir() + "/" + name;
  if (::access(final_dir.c_str(), F_OK) == 0) {
    if (existing_ok) return ReadImageMeta(final_dir);
    return MakeError(ErrorCode::kConflict, "image " + name + " exists", "image_exists");
  }
  std::string tmpl = ImagesDir() + "/" + name + kTmpMarker + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return SystemError("mkdtemp " + tmpl, errno);
  std::string tmp_dir = tmpl;
  ScopeGuard cleanup([&] { (void)RemoveTree(tmp_dir); });
  BH_TRY(MakeDir(tmp_dir, 0700));
  std::string rootfs = tmp_dir + "/rootfs";
  BH_TRY(MakeDir(rootfs, 0755, kStoredIdBase, kStoredIdBase));  // the image's "/"
  BH_TRY(fill(rootfs));
  BH_TRY(EnsureMountPoints(rootfs));

  ImageInfo info;
  info.name = name;
  info.created_at = NowRfc3339();
  auto size = TreeAllocatedBytes(rootfs);
  info.size_bytes = size.ok() ? *size : 0;
  const nlohmann::json written = meta(info);
  const ImageInfo holders = ImageInfoFromMeta(written);
  info.shared = holders.shared;
  info.tenants = holders.tenants;
  BH_TRY(WriteFile(tmp_dir + "/meta.json", written.dump(2) + "\n", 0644));

  std::lock_guard lock(images_mu_);
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {
      if (existing_ok) return ReadImageMeta(final_dir);
      return MakeError(ErrorCode::kConflict, "image " + name + " exists", "image_exists");
    }
    return SystemError("rename " + tmp_dir, errno);
  }
  cleanup.Dismiss();
  spdlog::info("storage: stored image {} ({}, {} bytes)", name, info.source, info.size_bytes);
  return info;
}

Result<ImageInfo> Storage::ImportImage(const std::string& name, const std::string& tar_path,
                                       const std::string& tenant) {
  if (name == kHostImage) return MakeError(ErrorCode::kConflict, "image name \"host\" is reserved", "image_exists");
  if (!IsValidImageName(name)) {
    return MakeError(ErrorCode::kInvalid, "invalid image name (letters, digits, . _ -): " + name);
  }
  // The host's import is images/<name>. A tenant's name is a reference in its own namespace,
  // on a directory named for the pair, so that no two tenants' (or the host's) names meet.
  std::string dir = name;
  if (!tenant.empty()) {
    if (OwnReference(name, tenant).ok())
      return MakeError(ErrorCode::kConflict, "image " + name + " exists", "image_exists");
    dir = HexEncode(Sha256("import\n" + tenant + "\n" + name));
  }
  return InstallImage(
      dir, [&](const std::string& rootfs) { return ExtractRootfsTarball(tar_path, rootfs); },
      [&](ImageInfo& info) {
        info.source = "tarball";
        nlohmann::json meta = FirstHolder(tenant, tenant.empty() ? "" : name);
        meta.update(nlohmann::json{{"name", info.name},
                                   {"source", info.source},
                                   {"created_at", info.created_at},
                                   {"size_bytes", info.size_bytes}});
        return meta;
      },
      /*existing_ok=*/false);
}

Result<ImageInfo> Storage::InstallBuiltImage(const BuiltImage& image, const std::string& tar_path,
                                            const std::string& tenant) {
  if (!IsSha256Digest(image.build_key)) return MakeError(ErrorCode::kInternal, "bad build key " + image.build_key);
  return InstallImage(
      ImageDirName(image.build_key),
      [&](const std::string& rootfs) -> Status {
        BH_TRY(ExtractRootfsTarball(tar_path, rootfs));
        if (!image.host_base) return {};
        // The mount point of the host's /usr (and the host image's additions there: Boot).
        const std::string usr = rootfs + "/usr";
        if (::mkdir(usr.c_str(), 0755) != 0 && errno != EEXIST) return SystemError("mkdir " + usr, errno);
        const uid_t stored_root = static_cast<uid_t>(kStoredIdBase);
        if (::chmod(usr.c_str(), 0755) != 0 || ::lchown(usr.c_str(), stored_root, stored_root) != 0)
          return SystemError("chown " + usr, errno);
        return {};
      },
      [&](ImageInfo& info) {
        info.source = "build";
        info.config = image.config;
        info.host_base = image.host_base;
        nlohmann::json meta = FirstHolder(tenant);
        meta.update(nlohmann::json{{"name", info.name},
                                   {"source", info.source},
                                   {"created_at", info.created_at},
                                   {"size_bytes", info.size_bytes},
                                   {"build_key", image.build_key},
                                   {"host_base", image.host_base},
                                   {"config", ImageConfigToJson(image.config)}});
        return meta;
      },
      /*existing_ok=*/true);
}

bool Storage::ImageUsesHostDirs(const std::string& name) const {
  if (name == kHostImage) return true;
  auto meta = ImageMeta(name);
  return meta.ok() && Field<bool>(*meta, "host_base", false);
}

Result<nlohmann::json> Storage::ImageMeta(const std::string& name) const {
  auto meta = IsValidImageName(name) ? ReadMetaJson(ImagesDir() + "/" + name) : Result<nlohmann::json>(Error{});
  if (!meta.ok()) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  return meta;
}

Result<ImageInfo> Storage::InstallPulledImage(const PulledImage& image, const std::string& tenant,
                                              const std::function<Status(const std::string& rootfs)>& unpack) {
  return InstallImage(
      ImageDirName(image.manifest_digest), unpack,
      [&](ImageInfo& info) {
        info.source = "registry";
        info.digest = image.manifest_digest;
        info.config = image.config;
        nlohmann::json meta = FirstHolder(tenant);
        meta.update(nlohmann::json{{"name", info.name},
                                   {"source", info.source},
                                   {"created_at", info.created_at},
                                   {"size_bytes", info.size_bytes},
                                   {"digest", image.manifest_digest},
                                   {"manifest_media_type", image.manifest_media_type},
                                   {"index_digest", image.index_digest},
                                   {"config_digest", image.config_digest},
                                   {"layers", image.layers},
                                   {"config", ImageConfigToJson(image.config)}});
        return meta;
      },
      /*existing_ok=*/true);
}

Status Storage::WriteImageMeta(const std::string& name, const nlohmann::json& meta) {
  const std::string dir = ImagesDir() + "/" + name;
  BH_TRY(WriteFile(dir + "/meta.json.new", meta.dump(2) + "\n", 0644));
  if (::rename((dir + "/meta.json.new").c_str(), (dir + "/meta.json").c_str()) != 0) {
    return SystemError("rename " + dir + "/meta.json.new", errno);
  }
  return {};
}

Result<ImageInfo> Storage::NameImage(const std::string& name, const std::string& reference,
                                     const std::string& tenant) {
  std::lock_guard lock(images_mu_);
  for (const auto& other : reference.empty() ? std::vector<std::string>() : ListDirNames(ImagesDir())) {
    if (other == name || other == kHostImage || !IsValidImageName(other)) continue;
    auto meta = ReadMetaJson(ImagesDir() + "/" + other);
    if (!meta.ok()) continue;
    ImageInfo holders = ImageInfoFromMeta(*meta);
    if (!HoldsImage(holders, tenant)) continue;
    auto& refs = ReferencesOf(holders, tenant);
    auto it = std::find(refs.begin(), refs.end(), reference);
    if (it == refs.end()) continue;
    refs.erase(it);
    PutHolders(*meta, holders);
    BH_TRY(WriteImageMeta(other, *meta));
  }
  auto meta = ImageMeta(name);
  if (!meta.ok()) return meta.error();
  ImageInfo info = ImageInfoFromMeta(*meta);
  const bool held = HoldsImage(info, tenant);
  if (tenant.empty()) info.shared = true;
  auto& refs = ReferencesOf(info, tenant);  // (makes the tenant a holder)
  const bool named = reference.empty() || std::find(refs.begin(), refs.end(), reference) != refs.end();
  if (!named) refs.push_back(reference);
  if (!held || !named) {
    PutHolders(*meta, info);
    BH_TRY(WriteImageMeta(name, *meta));
  }
  info.name = name;
  return info;
}

Result<size_t> Storage::UnnameImage(const std::string& name, const std::string& reference, const std::string& tenant) {
  std::lock_guard lock(images_mu_);
  auto meta = ImageMeta(name);
  if (!meta.ok()) return meta.error();
  ImageInfo info = ImageInfoFromMeta(*meta);
  if (!HoldsImage(info, tenant)) return size_t{0};
  auto& refs = ReferencesOf(info, tenant);
  if (auto it = std::find(refs.begin(), refs.end(), reference); it != refs.end()) {
    refs.erase(it);
    PutHolders(*meta, info);
    BH_TRY(WriteImageMeta(name, *meta));
  }
  return refs.size();
}

Result<bool> Storage::ReleaseImage(const std::string& name, const std::string& tenant) {
  std::lock_guard lock(images_mu_);
  auto meta = ImageMeta(name);
  if (!meta.ok()) return meta.error();
  ImageInfo info = ImageInfoFromMeta(*meta);
  if (HoldsImage(info, tenant)) {
    if (tenant.empty()) {
      info.shared = false;
      info.references.clear();
    } else {
      info.tenants.erase(tenant);
    }
    PutHolders(*meta, info);
    BH_TRY(WriteImageMeta(name, *meta));
  }
  return info.shared || !info.tenants.empty();
}

Result<PulledImage> Storage::PulledImageOf(const std::string& name) const {
  auto meta = ReadMetaJson(ImagesDir() + "/" + name);
  if (!meta.ok() || Field<std::string>(*meta, "source", "") != "registry") {
    return MakeError(ErrorCode::kNotFound, "image " + name + " was not pulled from a registry", "image_not_found");
  }
  PulledImage image;
  image.manifest_digest = Field<std::string>(*meta, "digest", "");
  image.manifest_media_type = Field<std::string>(*meta, "manifest_media_type", "");
  image.index_digest = Field<std::string>(*meta, "index_digest", "");
  image.config_digest = Field<std::string>(*meta, "config_digest", "");
  image.layers = Field<std::vector<std::string>>(*meta, "layers", {});
  if (auto c = meta->find("config"); c != meta->end() && c->is_object()) image.config = ImageConfigFromJson(*c);
  return image;
}

std::set<std::string> Storage::BlobsInUse(const std::optional<std::string>& seen_by) const {
  std::set<std::string> used;
  std::lock_guard lock(images_mu_);
  for (const auto& name : ListDirNames(ImagesDir())) {
    if (name == kHostImage || !IsValidImageName(name)) continue;
    auto meta = ReadMetaJson(ImagesDir() + "/" + name);
    if (!meta.ok() || (seen_by && !SeesImage(ImageInfoFromMeta(*meta), *seen_by))) continue;
    for (const char* key : {"digest", "index_digest", "config_digest"}) used.insert(Field<std::string>(*meta, key, ""));
    for (const std::string& layer : Field<std::vector<std::string>>(*meta, "layers", {})) used.insert(layer);
  }
  used.erase("");
  return used;
}

bool Storage::ImageVisible(const std::string& name, const std::string& tenant) const {
  if (name == kHostImage) return true;
  auto meta = ImageMeta(name);
  return meta.ok() && ImageExists(name) && SeesImage(ImageInfoFromMeta(*meta), tenant);
}

Result<std::string> Storage::ResolveImage(const std::string& text, const std::string& default_registry,
                                          const std::string& tenant) const {
  auto not_found = [&] {
    return MakeError(ErrorCode::kNotFound, "no image " + text + " is stored here (pull it first)", "image_not_found");
  };
  if (!IsRegistryReference(text)) {
    // A tenant's own names come before the host's, whose names every tenant shares.
    if (!tenant.empty())
      if (auto own = OwnReference(text, tenant); own.ok()) return own;
    if (IsValidImageName(text) && ImageVisible(text, tenant)) return text;
    if (auto built = OwnReference(text, ""); built.ok()) return built;  // a build's name
    if (default_registry.empty()) return not_found();
  }
  auto ref = ParseImageRef(text, default_registry);
  if (!ref.ok()) return not_found();  // no image can have been stored by such a name
  if (!ref->digest.empty()) {
    // By digest the tag does not matter: the digest pins the content.
    if (ImageVisible(ImageDirName(ref->digest), tenant)) return ImageDirName(ref->digest);
    std::lock_guard lock(images_mu_);
    for (const auto& name : ListDirNames(ImagesDir())) {
      if (name == kHostImage || !IsValidImageName(name)) continue;
      auto meta = ReadMetaJson(ImagesDir() + "/" + name);
      if (meta.ok() && Field<std::string>(*meta, "index_digest", "") == ref->digest &&
          SeesImage(ImageInfoFromMeta(*meta), tenant))
        return name;
    }
    return not_found();
  }
  if (!tenant.empty())
    if (auto own = OwnReference(ref->ToString(), tenant); own.ok()) return own;
  auto named = OwnReference(ref->ToString(), "");
  if (!named.ok()) return not_found();
  return named;
}

Result<std::string> Storage::OwnReference(const std::string& reference, const std::string& tenant) const {
  std::lock_guard lock(images_mu_);
  for (const auto& name : ListDirNames(ImagesDir())) {
    if (name == kHostImage || !IsValidImageName(name)) continue;
    auto meta = ReadMetaJson(ImagesDir() + "/" + name);
    if (!meta.ok()) continue;
    ImageInfo info = ImageInfoFromMeta(*meta);
    if (!HoldsImage(info, tenant)) continue;
    auto& refs = ReferencesOf(info, tenant);
    if (std::find(refs.begin(), refs.end(), reference) != refs.end()) return name;
  }
  return MakeError(ErrorCode::kNotFound, "no image " + reference, "image_not_found");
}

Result<ImageInfo> Storage::GetImage(const std::string& name) const {
  if (name == kHostImage) return ListImages().front();  // its size is measured, as listed
  auto info = IsValidImageName(name) ? ReadImageMeta(ImagesDir() + "/" + name) : Result<ImageInfo>(Error{});
  if (!info.ok()) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  info->name = name;
  return info;
}

std::vector<ImageInfo> Storage::ListImages() const {
  std::vector<ImageInfo> images;
  ImageInfo host;
  host.name = kHostImage;
  host.source = "host";
  if (auto rootfs = ImageRootfs(kHostImage); rootfs.ok()) {
    host.created_at = MtimeRfc3339(*rootfs);
    auto size = TreeAllocatedBytes(*rootfs);
    host.size_bytes = size.ok() ? *size : 0;
  }
  images.push_back(host);
  for (const auto& name : ListDirNames(ImagesDir())) {
    if (name == kHostImage || !IsValidImageName(name)) continue;
    auto info = ReadImageMeta(ImagesDir() + "/" + name);
    if (!info.ok()) continue;
    info->name = name;
    images.push_back(*info);
  }
  return images;
}

Status Storage::DeleteImage(const std::string& name) {
  if (name == kHostImage) return MakeError(ErrorCode::kConflict, "the host image cannot be deleted", "image_in_use");
  if (!IsValidImageName(name)) return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
  std::string dir = ImagesDir() + "/" + name;
  std::string doomed;
  {
    std::lock_guard lock(images_mu_);
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return MakeError(ErrorCode::kNotFound, "no image " + name, "image_not_found");
    }
    // Rename first so the name is free at once; the tree goes afterwards (or at next Open).
    std::string tmpl = ImagesDir() + "/" + name + kTmpMarker + "del-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return SystemError("mkdtemp " + tmpl, errno);
    doomed = tmpl;
    if (::rename(dir.c_str(), doomed.c_str()) != 0) return SystemError("rename " + dir, errno);
  }
  return RemoveTree(doomed);
}

// ---- layers ----

Result<WritableLayer> Storage::CreateLayer(const std::string& sandbox_id, uid_t host_uid, gid_t host_gid,
                                           int64_t disk_mb) {
  BH_TRY(CheckLayerId(sandbox_id));
  if (disk_mb <= 0) return MakeError(ErrorCode::kInvalid, "disk_mb must be positive");
  std::string dir = LayerDir(sandbox_id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) {
    return MakeError(ErrorCode::kConflict, "a layer for " + sandbox_id + " exists");
  }
  BH_TRY(layers_->CreateLayerDir(sandbox_id, disk_mb));
  ScopeGuard undo([&] { (void)layers_->DestroyLayerDir(sandbox_id); });
  WritableLayer layer{dir + "/upper", dir + "/work"};
  BH_TRY(MakeDir(layer.upper, 0755, host_uid, host_gid));
  BH_TRY(MakeDir(layer.upper + "/workspace", 0755, host_uid, host_gid));
  // Owned like upper/, so an overlay mounted from inside the sandbox's user namespace works too.
  BH_TRY(MakeDir(layer.work, 0700, host_uid, host_gid));
  undo.Dismiss();
  return layer;
}

Result<WritableLayer> Storage::GetLayer(const std::string& sandbox_id) const {
  BH_TRY(CheckLayerId(sandbox_id));
  std::string dir = LayerDir(sandbox_id);
  struct stat st;
  if (::lstat((dir + "/upper").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "no layer for " + sandbox_id);
  }
  return WritableLayer{dir + "/upper", dir + "/work"};
}

Status Storage::SetLayerQuota(const std::string& sandbox_id, int64_t disk_mb) {
  BH_TRY(CheckLayerId(sandbox_id));
  if (disk_mb <= 0) return MakeError(ErrorCode::kInvalid, "disk_mb must be positive");
  return layers_->SetLimit(sandbox_id, disk_mb);
}

Result<int64_t> Storage::LayerUsageBytes(const std::string& sandbox_id) const {
  BH_TRY(CheckLayerId(sandbox_id));
  return layers_->UsageBytes(sandbox_id);
}

Status Storage::DestroyLayer(const std::string& sandbox_id) {
  BH_TRY(CheckLayerId(sandbox_id));
  return layers_->DestroyLayerDir(sandbox_id);
}

std::vector<std::string> Storage::ListLayers() const {
  std::vector<std::string> ids;
  for (const auto& name : ListDirNames(layers_->root())) {
    if (IsSafeName(name) && !name.starts_with(kVolumeLayerPrefix)) ids.push_back(name);
  }
  return ids;
}

// ---- snapshots ----

Status Storage::CaptureSnapshot(const std::string& sandbox_id, const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(sandbox_id));
  BH_TRY(CheckLayerId(snapshot_id));
  struct stat st;
  if (::lstat(SnapshotDir(snapshot_id).c_str(), &st) == 0) {
    return MakeError(ErrorCode::kConflict, "a snapshot " + snapshot_id + " exists");
  }
  if (::lstat((LayerDir(sandbox_id) + "/upper").c_str(), &st) != 0) {
    return MakeError(ErrorCode::kNotFound, "no layer for " + sandbox_id);
  }
  Status st_capture = layers_->CaptureSnapshot(sandbox_id, snapshot_id);
  if (!st_capture.ok()) (void)layers_->DestroySnapshotDir(snapshot_id);
  return st_capture;
}

Result<WritableLayer> Storage::CreateLayerFromSnapshot(const std::string& sandbox_id, const std::string& snapshot_id,
                                                       const IdShift& owners, int64_t disk_mb) {
  BH_TRY(CheckLayerId(sandbox_id));
  BH_TRY(CheckLayerId(snapshot_id));
  if (disk_mb <= 0) return MakeError(ErrorCode::kInvalid, "disk_mb must be positive");
  std::string dir = LayerDir(sandbox_id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) return MakeError(ErrorCode::kConflict, "a layer for " + sandbox_id + " exists");
  if (::lstat((SnapshotDir(snapshot_id) + "/upper").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "no snapshot " + snapshot_id, "snapshot_not_found");
  }
  BH_TRY(layers_->CreateLayerFrom(sandbox_id, SnapshotDir(snapshot_id), disk_mb, owners));
  ScopeGuard undo([&] { (void)layers_->DestroyLayerDir(sandbox_id); });
  WritableLayer layer{dir + "/upper", dir + "/work"};
  // overlayfs wants an empty workdir of its own (a btrfs snapshot brought the old one along).
  BH_TRY(RemoveTree(layer.work));
  BH_TRY(MakeDir(layer.work, 0700, owners.to, owners.to));
  undo.Dismiss();
  return layer;
}

Status Storage::MakeSnapshotDir(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  return layers_->CreateSnapshotDir(snapshot_id);
}

Status Storage::SealSnapshot(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  return layers_->SealSnapshotDir(snapshot_id);
}

Status Storage::DestroySnapshot(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  BH_TRY(RemoveTree(MemoryDir(snapshot_id)));
  return layers_->DestroySnapshotDir(snapshot_id);
}

std::vector<std::string> Storage::ListSnapshots() const {
  std::set<std::string> ids;
  for (const std::string& dir : {layers_->snapshots_root(), MemoryRoot()}) {
    for (const auto& name : ListDirNames(dir)) {
      if (IsSafeName(name)) ids.insert(name);
    }
  }
  return {ids.begin(), ids.end()};
}

std::string Storage::MemoryRoot() const { return state_dir_ + "/memory"; }
std::string Storage::MemoryDir(const std::string& snapshot_id) const { return MemoryRoot() + "/" + snapshot_id; }

Result<std::string> Storage::MakeMemoryDir(const std::string& snapshot_id) {
  BH_TRY(CheckLayerId(snapshot_id));
  const std::string dir = MemoryDir(snapshot_id);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return MakeError(ErrorCode::kConflict, "a memory image of " + snapshot_id + " exists");
    return SystemError("mkdir " + dir, errno);
  }
  return dir;
}

std::string Storage::SnapshotDir(const std::string& snapshot_id) const { return layers_->SnapshotPath(snapshot_id); }

Result<int64_t> Storage::SnapshotSizeBytes(const std::string& snapshot_id) const {
  BH_TRY(CheckLayerId(snapshot_id));
  auto files = TreeAllocatedBytes(SnapshotDir(snapshot_id) + "/upper");
  if (!files) return files.error();
  struct stat st;
  if (::lstat(MemoryDir(snapshot_id).c_str(), &st) != 0) return *files;
  auto memory = TreeAllocatedBytes(MemoryDir(snapshot_id));
  if (!memory) return memory.error();
  return *files + *memory;
}

std::string Storage::driver() const { return layers_->driver(); }

bool Storage::quotas_enforced() const { return layers_->enforced(); }
std::string Storage::quota_backend() const { return layers_->backend(); }

}  // namespace bulkhead::storage
