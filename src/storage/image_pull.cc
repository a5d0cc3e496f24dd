#include "storage/image_pull.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <chrono>

#include "common/base64.h"
#include "common/digest.h"
#include "common/scope_guard.h"
#include "storage/blob_store.h"
#include "storage/fs_util.h"
#include "storage/layer_apply.h"
#include "storage/registry_client.h"
#include "storage/storage.h"

namespace bulkhead::storage {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// "https://host:5000/v1/" -> "host:5000": Docker writes some keys as URLs.
std::string AuthKeyHost(std::string key) {
  if (auto scheme = key.find("://"); scheme != std::string::npos) key.erase(0, scheme + 3);
  if (auto slash = key.find('/'); slash != std::string::npos) key.erase(slash);
  return key;
}

// A registry's manifest answer, checked: its bytes hash to `expected` when a digest is known,
// and agree with the Docker-Content-Digest header when the registry sends one.
Status CheckManifestDigest(const FetchedManifest& fetched, const std::string& expected, const std::string& what) {
  const std::string actual = Sha256Digest(fetched.body);
  if (!expected.empty() && actual != expected) {
    return MakeError(ErrorCode::kBadGateway, what + " does not match its digest " + expected + " (got " + actual + ")",
                     "digest_mismatch");
  }
  if (!fetched.digest_header.empty() && fetched.digest_header != actual && fetched.digest_header.starts_with("sha256:")) {
    return MakeError(ErrorCode::kBadGateway, what + ": the registry's Docker-Content-Digest " + fetched.digest_header +
                                                 " does not match the manifest's bytes (" + actual + ")",
                     "digest_mismatch");
  }
  return {};
}

// Named with its port, or by host alone for every port (as Docker's insecure-registries).
bool IsInsecure(const RegistrySettings& settings, const std::string& registry) {
  if (settings.insecure.contains(registry)) return true;
  const size_t colon = registry.rfind(':');
  const bool has_port = colon != std::string::npos && registry.find(']', colon) == std::string::npos;
  return has_port && settings.insecure.contains(registry.substr(0, colon));
}

int64_t FreeBytes(const std::string& path) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) != 0) return INT64_MAX;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace

Result<std::map<std::string, RegistryLogin>> ReadDockerAuthFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return MakeError(ErrorCode::kInvalid, "cannot read the registry auth file " + path + ": " + text.error().message);
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return MakeError(ErrorCode::kInvalid, "the registry auth file " + path + " is not a JSON object");
  std::map<std::string, RegistryLogin> logins;
  auto auths = doc.find("auths");
  if (auths == doc.end() || !auths->is_object()) return logins;
  for (const auto& [key, entry] : auths->items()) {
    if (!entry.is_object()) continue;
    RegistryLogin login;
    if (auto auth = entry.find("auth"); auth != entry.end() && auth->is_string()) {
      auto decoded = Base64Decode(auth->get<std::string>());
      size_t colon = decoded ? decoded->find(':') : std::string::npos;
      if (colon == std::string::npos) {
        return MakeError(ErrorCode::kInvalid, "the registry auth file's entry for " + key + " is not base64 of user:password");
      }
      login.username = decoded->substr(0, colon);
      login.password = decoded->substr(colon + 1);
    } else {
      auto user = entry.find("username");
      auto pass = entry.find("password");
      if (user == entry.end() || !user->is_string() || pass == entry.end() || !pass->is_string()) continue;
      login.username = user->get<std::string>();
      login.password = pass->get<std::string>();
    }
    logins[AuthKeyHost(key)] = std::move(login);
  }
  return logins;
}

ImagePuller::ImagePuller(Storage& storage, RegistrySettings settings)
    : storage_(storage), settings_(std::move(settings)) {}

void ImagePuller::CancelAll() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  for (Session* s : sessions_) s->client->Cancel();
}

Result<bool> ImagePuller::CollectGarbage(int64_t* freed_bytes) {
  *freed_bytes = 0;
  std::lock_guard lock(mu_);  // no pull starts meanwhile
  if (active_ > 0) return false;
  auto freed = storage_.blobs().RemoveAllBut(storage_.BlobsInUse());
  if (!freed.ok()) return freed.error();
  *freed_bytes = *freed;
  return true;
}

RegistryClientOptions ImagePuller::ClientOptions(const std::string& registry,
                                                const std::optional<RegistryLogin>& login,
                                                const std::string& tenant) const {
  RegistryClientOptions options;
  options.plain_http = IsInsecure(settings_, registry);
  if (login) {
    options.credentials = RegistryCredentials{login->username, login->password};
  } else if (auto it = settings_.logins.find(registry); it != settings_.logins.end() && tenant.empty()) {
    options.credentials = RegistryCredentials{it->second.username, it->second.password};
  }
  options.ca_file = settings_.ca_file;
  options.connect_timeout = std::chrono::milliseconds(settings_.connect_timeout_ms);
  options.idle_timeout = std::chrono::milliseconds(settings_.idle_timeout_ms);
  return options;
}

ImagePuller::Active::Active(ImagePuller& puller, Session& session) : puller_(puller), session_(session) {
  std::lock_guard lock(puller_.mu_);
  refused_ = puller_.cancelled_;
  if (refused_) return;
  ++puller_.active_;
  puller_.sessions_.insert(&session_);
}

ImagePuller::Active::~Active() {
  if (refused_) return;
  std::lock_guard lock(puller_.mu_);
  --puller_.active_;
  puller_.sessions_.erase(&session_);
}

Result<ImageInfo> ImagePuller::Pull(const PullRequest& request, const PullListener& listener) {
  const ImageRef& ref = request.ref;
  const std::string name = ref.ToString();
  RegistryClient client(ref.registry, ref.repository, ClientOptions(ref.registry, request.login, request.tenant));
  Session session{&client};
  Active active(*this, session);
  if (active.refused()) return MakeError(ErrorCode::kUnavailable, "the daemon is shutting down");
  BlobStore& blobs = storage_.blobs();
  listener(json{{"status", "resolving"}, {"image", name}});
  // What this tenant may have without fetching: the blobs of the images it sees.
  const std::set<std::string> seen = storage_.BlobsInUse(request.tenant);
  // A blob stored for images this tenant does not see: its bytes must come from the registry to
  // this tenant's login and hash to the digest before the tenant may have it.
  auto prove = [&](const Descriptor& blob) -> Status {
    if (seen.contains(blob.digest)) return {};
    Sha256Stream hash;
    uint64_t got = 0;
    BH_TRY(client.FetchBlob(
        blob.digest, 0, blob.size,
        [&](std::string_view piece) -> Status {
          hash.Update(piece);
          got += piece.size();
          return {};
        },
        [&]() -> Status {
          hash = Sha256Stream();
          got = 0;
          return {};
        }));
    if (got != blob.size || "sha256:" + HexEncode(hash.Digest()) != blob.digest)
      return MakeError(ErrorCode::kBadGateway, "blob " + blob.digest + " from the registry does not match its digest",
                       "digest_mismatch");
    return {};
  };

  // The manifest, through an index when the reference names one.
  auto fetched = client.GetManifest(ref.Reference(), kMaxManifestBytes);
  if (!fetched.ok()) return fetched.error();
  BH_TRY(CheckManifestDigest(*fetched, ref.digest, "the manifest of " + name));
  auto type = ManifestMediaType(fetched->body, fetched->media_type);
  if (!type.ok()) return type.error();
  std::string index_body;
  if (IsIndexType(*type)) {
    auto index = ParseImageIndex(fetched->body);
    if (!index.ok()) return index.error();
    auto picked = PickPlatform(*index, request.platform);
    if (!picked.ok()) return MakeError(picked.error().code, name + ": " + picked.error().message, picked.error().detail_code);
    index_body = std::move(fetched->body);
    fetched = client.GetManifest(picked->digest, kMaxManifestBytes);
    if (!fetched.ok()) return fetched.error();
    BH_TRY(CheckManifestDigest(*fetched, picked->digest, "the " + request.platform.architecture + " manifest of " + name));
    type = ManifestMediaType(fetched->body, fetched->media_type);
    if (!type.ok()) return type.error();
    if (!IsManifestType(*type)) return MakeError(ErrorCode::kInvalid, name + ": an index entry points at another index", "invalid_image");
  }
  auto manifest = ParseImageManifest(fetched->body, *type);
  if (!manifest.ok()) return manifest.error();
  const std::string manifest_digest = Sha256Digest(fetched->body);

  uint64_t total_bytes = 0, missing_bytes = 0;
  json layers = json::array();
  for (const Descriptor& layer : manifest->layers) {
    total_bytes += layer.size;
    if (!blobs.Has(layer.digest)) missing_bytes += layer.size;
    // ("cached" only for blobs the tenant sees: it learns nothing of other tenants' blobs.)
    layers.push_back({{"digest", layer.digest}, {"size", layer.size}, {"cached", seen.contains(layer.digest)}});
  }
  listener(json{{"status", "resolved"}, {"image", name}, {"digest", manifest_digest}, {"layers", layers},
                {"total_bytes", total_bytes}});

  // Stored already under this manifest: the reference is all that is new (for a tenant that did
  // not see it, once the registry has given it every blob).
  if (storage_.ImageExists(ImageDirName(manifest_digest))) {
    if (!storage_.ImageVisible(ImageDirName(manifest_digest), request.tenant)) {
      BH_TRY(prove(manifest->config));
      for (const Descriptor& layer : manifest->layers) BH_TRY(prove(layer));
    }
    return storage_.NameImage(ImageDirName(manifest_digest), name, request.tenant);
  }
  if (static_cast<int64_t>(missing_bytes) > FreeBytes(blobs.root())) {
    return MakeError(ErrorCode::kDiskFull,
                     name + " needs " + std::to_string(missing_bytes) + " bytes of layers, more than the disk has free");
  }

  // The config: what the image runs with. Small, fetched whole and checked.
  std::string config_body;
  {
    auto writer = blobs.BeginWrite(manifest->config.digest, manifest->config.size);
    if (!writer.ok()) return writer.error();
    if ((*writer)->done()) {
      BH_TRY(prove(manifest->config));
    } else {
      BH_TRY((*writer)->Restart());
      BH_TRY(client.FetchBlob(manifest->config.digest, 0, manifest->config.size,
                              [&](std::string_view piece) { return (*writer)->Append(piece); },
                              [&] { return (*writer)->Restart(); }));
      BH_TRY((*writer)->Commit());
    }
    auto read = blobs.ReadSmall(manifest->config.digest, kMaxManifestBytes);
    if (!read.ok()) return read.error();
    config_body = std::move(*read);
  }
  auto config = ParseImageConfig(config_body);
  if (!config.ok()) return config.error();
  if (!config->architecture.empty() && config->architecture != request.platform.architecture) {
    return MakeError(ErrorCode::kInvalid,
                     name + " is built for " + config->os + "/" + config->architecture + ", not " +
                         request.platform.os + "/" + request.platform.architecture,
                     "platform_mismatch");
  }
  if (!config->diff_ids.empty() && config->diff_ids.size() != manifest->layers.size()) {
    return MakeError(ErrorCode::kInvalid, name + ": the config lists " + std::to_string(config->diff_ids.size()) +
                                              " layers, the manifest " + std::to_string(manifest->layers.size()),
                     "invalid_image");
  }

  // The layers, each written to the store as it arrives and checked against its digest.
  uint64_t done_bytes = 0;
  for (const Descriptor& layer : manifest->layers) {
    auto writer = blobs.BeginWrite(layer.digest, layer.size);
    if (!writer.ok()) return writer.error();
    BlobWriter& w = **writer;
    if (w.done()) {
      BH_TRY(prove(layer));
      done_bytes += layer.size;
      listener(json{{"status", "downloaded"}, {"layer", layer.digest}, {"size", layer.size},
                    {"cached", seen.contains(layer.digest)}});
      continue;
    }
    const uint64_t resumed_from = w.offset();
    auto last_report = Clock::now();
    auto report = [&](bool force) {
      if (!force && Clock::now() - last_report < std::chrono::milliseconds(100)) return;
      last_report = Clock::now();
      listener(json{{"status", "downloading"}, {"layer", layer.digest}, {"current", w.offset()}, {"total", layer.size},
                    {"bytes_done", done_bytes + w.offset()}, {"total_bytes", total_bytes}});
    };
    report(true);
    Status fetched_blob = w.offset() == layer.size
                              ? Status()
                              : client.FetchBlob(
                                    layer.digest, w.offset(), layer.size,
                                    [&](std::string_view piece) -> Status {
                                      BH_TRY(w.Append(piece));
                                      report(false);
                                      return Status();
                                    },
                                    [&] { return w.Restart(); });
    if (!fetched_blob.ok()) return fetched_blob.error();
    BH_TRY(w.Commit());
    // A tenant's pull resumed from a partial download that may have been another tenant's: the
    // part before came from a registry this tenant's login may not reach, so the registry must
    // give it the whole blob too. (The host's resumes: its registries served the rest of the
    // very blob, and its key reaches every tenant's images anyway.)
    if (resumed_from > 0 && !request.tenant.empty()) BH_TRY(prove(layer));
    done_bytes += layer.size;
    listener(json{{"status", "downloaded"}, {"layer", layer.digest}, {"size", layer.size}, {"cached", false},
                  {"resumed_from", resumed_from}});
  }
  BH_TRY(blobs.Put(manifest_digest, fetched->body));
  std::string index_digest;
  if (!index_body.empty()) {
    index_digest = Sha256Digest(index_body);
    BH_TRY(blobs.Put(index_digest, index_body));
  }

  // The tree: the layers applied bottom first.
  PulledImage image;
  image.manifest_digest = manifest_digest;
  image.manifest_media_type = *type;
  image.index_digest = index_digest;
  image.config_digest = manifest->config.digest;
  image.config = *config;
  for (const Descriptor& layer : manifest->layers) image.layers.push_back(layer.digest);
  auto installed = storage_.InstallPulledImage(image, request.tenant, [&](const std::string& rootfs) -> Status {
    for (size_t i = 0; i < manifest->layers.size(); ++i) {
      const Descriptor& layer = manifest->layers[i];
      listener(json{{"status", "unpacking"}, {"layer", layer.digest}, {"index", i}, {"count", manifest->layers.size()}});
      auto applied = ApplyLayer(blobs.PathOf(layer.digest), rootfs);
      if (!applied.ok()) {
        return MakeError(applied.error().code, "layer " + layer.digest + ": " + applied.error().message,
                         applied.error().detail_code);
      }
    }
    return {};
  });
  if (!installed.ok()) return installed.error();
  return storage_.NameImage(installed->name, name, request.tenant);
}

}  // namespace bulkhead::storage
