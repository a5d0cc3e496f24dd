// `image push` (ImagePuller::Push, image_pull.h): a stored image written to a registry.
#include <fcntl.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "storage/blob_store.h"
#include "storage/image_pull.h"
#include "storage/registry_client.h"
#include "storage/storage.h"
#include "storage/tar_stream.h"

namespace bulkhead::storage {
namespace {

using json = nlohmann::json;

// A stored blob as an upload's body, read from the store as it is sent.
struct StoredBlob {
  UniqueFd fd;
  RegistryClient::Body body;
};

Result<std::unique_ptr<StoredBlob>> OpenStoredBlob(BlobStore& blobs, const std::string& digest) {
  auto blob = std::make_unique<StoredBlob>();
  blob->fd.reset(::open(blobs.PathOf(digest).c_str(), O_RDONLY | O_CLOEXEC));
  if (!blob->fd) return MakeError(ErrorCode::kInternal, "blob " + digest + " is missing from the store");
  const off_t size = ::lseek(blob->fd.get(), 0, SEEK_END);
  if (size < 0) return SystemError("seek " + blobs.PathOf(digest), errno);
  blob->body.size = static_cast<uint64_t>(size);
  blob->body.read = [fd = blob->fd.get()](uint64_t offset, char* buffer, size_t capacity) -> Result<size_t> {
    for (;;) {
      ssize_t n = ::pread(fd, buffer, capacity, static_cast<off_t>(offset));
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) return SystemError("read a stored blob", errno);
    }
  };
  return blob;
}

// What the config says to run with, in the image config's own spelling.
json RunConfig(const ImageConfig& c) {
  json out = json::object();
  if (!c.env.empty()) out["Env"] = c.env;
  if (!c.working_dir.empty()) out["WorkingDir"] = c.working_dir;
  if (!c.user.empty()) out["User"] = c.user;
  if (!c.entrypoint.empty()) out["Entrypoint"] = c.entrypoint;
  if (!c.cmd.empty()) out["Cmd"] = c.cmd;
  if (!c.exposed_ports.empty()) {
    out["ExposedPorts"] = json::object();
    for (const std::string& port : c.exposed_ports) out["ExposedPorts"][port] = json::object();
  }
  if (!c.labels.empty()) out["Labels"] = c.labels;
  return out;
}

}  // namespace

Result<PulledImage> ImagePuller::LayerOfTree(const ImageInfo& image) {
  BlobStore& blobs = storage_.blobs();
  auto rootfs = storage_.ImageRootfs(image.name);
  if (!rootfs.ok()) return rootfs.error();

  // The tree as one uncompressed tar (so its digest is its diff_id too), owners as the image's own.
  std::string temp = blobs.TempDir() + "/export-XXXXXX";
  UniqueFd fd(::mkstemp(temp.data()));
  if (!fd) return SystemError("mkstemp " + temp, errno);
  ScopeGuard remove_temp([&] { (void)::unlink(temp.c_str()); });
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> hash(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(hash.get(), EVP_sha256(), nullptr);
  uint64_t size = 0;
  BH_TRY(StreamDirectoryAsTar(
      *rootfs,
      [&](std::string_view piece) -> Status {
        for (size_t done = 0; done < piece.size();) {
          ssize_t n = ::write(fd.get(), piece.data() + done, piece.size() - done);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) {
            return errno == ENOSPC ? MakeError(ErrorCode::kDiskFull, "no space for the layer of " + image.name)
                                   : SystemError("write " + temp, errno);
          }
          done += static_cast<size_t>(n);
        }
        EVP_DigestUpdate(hash.get(), piece.data(), piece.size());
        size += piece.size();
        return {};
      },
      [&](const std::string& warning) { spdlog::warn("image push of {}: {}", image.name, warning); },
      [](archive_entry* entry) {
        auto own = [](la_int64_t id) -> la_int64_t {
          const bool stored = id >= kStoredIdBase && id < static_cast<la_int64_t>(kStoredIdBase) + kIdCount;
          return stored ? id - kStoredIdBase : kNobodyId;
        };
        archive_entry_set_uid(entry, own(archive_entry_uid(entry)));
        archive_entry_set_gid(entry, own(archive_entry_gid(entry)));
        archive_entry_set_uname(entry, nullptr);
        archive_entry_set_gname(entry, nullptr);
      }));
  if (::fsync(fd.get()) != 0) return SystemError("sync " + temp, errno);
  unsigned char sum[EVP_MAX_MD_SIZE];
  unsigned int sum_size = 0;
  EVP_DigestFinal_ex(hash.get(), sum, &sum_size);
  const std::string layer = "sha256:" + HexEncode(std::string_view(reinterpret_cast<char*>(sum), sum_size));
  BH_TRY(blobs.Adopt(temp, layer));
  remove_temp.Dismiss();

  PulledImage made;
  made.config = image.config.value_or(ImageConfig{});
  const Platform platform = HostPlatform();
  const json config = {{"architecture", platform.architecture},
                       {"os", platform.os},
                       {"created", image.created_at},
                       {"config", RunConfig(made.config)},
                       {"rootfs", {{"type", "layers"}, {"diff_ids", {layer}}}},
                       {"history", {{{"created", image.created_at}, {"created_by", "bulkhead image import"}}}}};
  const std::string config_body = config.dump();
  made.config_digest = Sha256Digest(config_body);
  BH_TRY(blobs.Put(made.config_digest, config_body));
  const json manifest = {
      {"schemaVersion", 2},
      {"mediaType", media_type::kOciManifest},
      {"config", {{"mediaType", media_type::kOciConfig}, {"digest", made.config_digest}, {"size", config_body.size()}}},
      {"layers", {{{"mediaType", media_type::kOciLayer}, {"digest", layer}, {"size", size}}}}};
  const std::string manifest_body = manifest.dump();
  made.manifest_digest = Sha256Digest(manifest_body);
  made.manifest_media_type = media_type::kOciManifest;
  BH_TRY(blobs.Put(made.manifest_digest, manifest_body));
  made.layers = {layer};
  return made;
}

Result<PushResult> ImagePuller::Push(const PushRequest& request, const PullListener& listener) {
  const ImageRef& target = request.target;
  auto image = storage_.GetImage(request.image);
  if (!image.ok()) return image.error();
  if (image->source == "host") {
    return MakeError(ErrorCode::kInvalid, "the host image is a view of this host's own OS: it cannot be pushed",
                     "image_not_pushable");
  }
  RegistryClientOptions options = ClientOptions(target.registry, request.login, request.tenant);
  options.push = true;
  RegistryClient client(target.registry, target.repository, options);
  Session session{&client};
  Active active(*this, session);
  if (active.refused()) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  BlobStore& blobs = storage_.blobs();
  listener(json{{"status", "preparing"}, {"image", request.image}, {"target", target.ToString()}});

  Result<PulledImage> parts = image->source == "registry" ? storage_.PulledImageOf(image->name) : LayerOfTree(*image);
  if (!parts.ok()) return parts.error();
  if (!target.digest.empty() && target.digest != parts->manifest_digest) {
    return MakeError(ErrorCode::kInvalid,
                     "the target names digest " + target.digest + ", but the image's manifest is " + parts->manifest_digest,
                     "digest_mismatch");
  }
  std::vector<std::string> wanted = parts->layers;
  wanted.push_back(parts->config_digest);
  for (const std::string& digest : wanted) {
    auto present = client.HasBlob(digest);
    if (!present.ok()) return present.error();
    if (*present) {
      listener(json{{"status", "exists"}, {"blob", digest}});
      continue;
    }
    auto blob = OpenStoredBlob(blobs, digest);
    if (!blob.ok()) return blob.error();
    listener(json{{"status", "uploading"}, {"blob", digest}, {"size", (*blob)->body.size}});
    BH_TRY(client.UploadBlob(digest, (*blob)->body));
    listener(json{{"status", "uploaded"}, {"blob", digest}, {"size", (*blob)->body.size}});
  }
  auto manifest = blobs.ReadSmall(parts->manifest_digest, kMaxManifestBytes);
  if (!manifest.ok()) return manifest.error();
  BH_TRY(client.PutManifest(target.Reference(), parts->manifest_media_type, *manifest));
  spdlog::info("image {} pushed as {} ({})", request.image, target.ToString(), parts->manifest_digest);
  return PushResult{target.ToString(), parts->manifest_digest};
}

}  // namespace bulkhead::storage
