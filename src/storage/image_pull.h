// `image pull` and `image push`: an image fetched from a registry that speaks the OCI
// distribution API and stored as every image is (a rootfs tree and meta.json under images/), its
// blobs kept once in the blob store (blob_store.h) so that later pulls of images sharing layers
// fetch them once; and a stored image written to a registry (image_push.cc).
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "storage/image_info.h"
#include "storage/image_ref.h"
#include "storage/oci_manifest.h"
#include "storage/registry_settings.h"

namespace bulkhead::storage {

class Storage;
struct RegistryClientOptions;  // registry_client.h
class RegistryClient;

// Reads a Docker config.json's "auths": {"host": {"auth": base64(user:password)} or
// {"username", "password"}}; keys given as URLs ("https://host/v1/") are reduced to the host.
Result<std::map<std::string, RegistryLogin>> ReadDockerAuthFile(const std::string& path);

struct PullRequest {
  ImageRef ref;
  // From the API call; else, for the host's pulls only, settings.logins (the operator's logins
  // are not every tenant's).
  std::optional<RegistryLogin> login;
  Platform platform;   // HostPlatform() unless asked otherwise
  std::string tenant;  // whose image it becomes ("" the host's)
};

struct PushRequest {
  std::string image;  // a stored image's name (Storage::ResolveImage gave it)
  ImageRef target;    // where it goes: a tag, or the manifest's own digest
  std::optional<RegistryLogin> login;
  std::string tenant;  // who pushes ("" the host): settings.logins are the host's only
};

struct PushResult {
  std::string reference;  // target, as pushed
  std::string digest;     // the manifest's
};

// A pull's (or push's) progress as NDJSON-ready objects ({"status": "resolved" | "downloading" |
// "downloaded" | "unpacking", ...}); called on the pulling thread.
using PullListener = std::function<void(const nlohmann::json& event)>;

// Pulls run here, one call per pull on a thread that may block. Shared by the daemon.
class ImagePuller {
 public:
  ImagePuller(Storage& storage, RegistrySettings settings);

  // Fetches ref's manifest (picking `platform` from an index), config and layers (those not
  // stored yet; an interrupted download goes on from where it stopped), checks each against its
  // digest as it arrives, unpacks the layers in order into a new image, and names it by the
  // reference. An image already stored under the same manifest digest only gains the name.
  // A blob stored already but in no image the tenant sees (another tenant's) is fetched all the
  // same and checked, then dropped: the registry must give it to this tenant's login, since
  // knowing a digest is no right to its content.
  Result<ImageInfo> Pull(const PullRequest& request, const PullListener& listener);

  // Writes a stored image to target's registry: the blobs it lacks (a pulled image's own, or for
  // an imported one a layer made of its tree, uncompressed, with a config and a manifest), then
  // the manifest under target's tag. The host image cannot be pushed (it is this host's OS).
  Result<PushResult> Push(const PushRequest& request, const PullListener& listener);

  // Ends the pulls and pushes under way (shutdown): they fail at once with kUnavailable.
  void CancelAll();

  // Removes the blobs no stored image uses, and abandoned partial downloads. Deferred (answers
  // false) while a pull is under way, since its blobs belong to no image yet.
  Result<bool> CollectGarbage(int64_t* freed_bytes);

  const RegistrySettings& settings() const { return settings_; }

 private:
  struct Session {
    RegistryClient* client = nullptr;
  };
  // A transfer's registration, so that CancelAll reaches its client and garbage collection waits.
  class Active {
   public:
    Active(ImagePuller& puller, Session& session);
    ~Active();
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;
    bool refused() const { return refused_; }  // the daemon is shutting down

   private:
    ImagePuller& puller_;
    Session& session_;
    bool refused_ = false;
  };
  RegistryClientOptions ClientOptions(const std::string& registry, const std::optional<RegistryLogin>& login,
                                      const std::string& tenant) const;
  // A pushable form of a stored image that is no registry's: its tree as one layer (image_push.cc).
  Result<PulledImage> LayerOfTree(const ImageInfo& image);

  Storage& storage_;
  RegistrySettings settings_;
  std::mutex mu_;
  int active_ = 0;  // pulls under way
  std::set<Session*> sessions_;
  bool cancelled_ = false;
};

}  // namespace bulkhead::storage
