// The JSON documents of an image in a registry (OCI image spec, and Docker's v2 schema 2 that
// predates it): indexes and manifest lists, manifests, and the image config. Parsed strictly:
// every digest, size and media type a pull acts on is checked here, before any download.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::storage {

namespace media_type {
inline constexpr char kOciIndex[] = "application/vnd.oci.image.index.v1+json";
inline constexpr char kDockerList[] = "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr char kOciManifest[] = "application/vnd.oci.image.manifest.v1+json";
inline constexpr char kDockerManifest[] = "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kOciConfig[] = "application/vnd.oci.image.config.v1+json";
inline constexpr char kDockerConfig[] = "application/vnd.docker.container.image.v1+json";
inline constexpr char kOciLayer[] = "application/vnd.oci.image.layer.v1.tar";
inline constexpr char kOciLayerGzip[] = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr char kOciLayerZstd[] = "application/vnd.oci.image.layer.v1.tar+zstd";
inline constexpr char kDockerLayer[] = "application/vnd.docker.image.rootfs.diff.tar.gzip";
}  // namespace media_type

// What a registry is asked for a manifest: every type above that a manifest request can answer.
std::string ManifestAcceptHeader();
bool IsIndexType(std::string_view media_type);
bool IsManifestType(std::string_view media_type);

struct Platform {
  std::string os;
  std::string architecture;
  std::string variant;
};

struct Descriptor {
  std::string media_type;
  std::string digest;  // IsSha256Digest
  uint64_t size = 0;
  std::optional<Platform> platform;  // in an index
};

struct ImageIndex {
  std::vector<Descriptor> manifests;
};

struct ImageManifest {
  std::string media_type;
  Descriptor config;
  std::vector<Descriptor> layers;  // bottom first
};

// What the image's config says about running it (the parts bulkhead applies or shows).
struct ImageConfig {
  std::string os;
  std::string architecture;
  std::vector<std::string> env;  // "NAME=value"
  std::string working_dir;
  std::string user;
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> exposed_ports;  // "8080/tcp"
  std::map<std::string, std::string> labels;
  std::vector<std::string> diff_ids;  // the uncompressed layers' digests, bottom first
};

// The config as bulkhead stores it (an image's meta.json "config"; the API's).
nlohmann::json ImageConfigToJson(const ImageConfig& config);

// The largest manifest, index or config taken: a registry sending more is refused before
// its body is read.
inline constexpr size_t kMaxManifestBytes = 4 << 20;

// The type of a manifest document: its own mediaType field where it has one, else the
// Content-Type the registry gave. kInvalid for the schema 1 format and anything unknown.
Result<std::string> ManifestMediaType(std::string_view body, std::string_view content_type);
Result<ImageIndex> ParseImageIndex(std::string_view body);
Result<ImageManifest> ParseImageManifest(std::string_view body, const std::string& media_type);
Result<ImageConfig> ParseImageConfig(std::string_view body);

// The manifest in `index` for os/architecture[/variant] (a variant is matched only when the
// wanted one is given). kNotFound naming the platforms the index has when none fits.
Result<Descriptor> PickPlatform(const ImageIndex& index, const Platform& wanted);
// This machine's platform in OCI terms: linux and amd64, arm64, ...
Platform HostPlatform();

}  // namespace bulkhead::storage
