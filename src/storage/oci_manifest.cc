#include "storage/oci_manifest.h"

#include <sys/utsname.h>

#include <nlohmann/json.hpp>

#include "storage/image_ref.h"

namespace bulkhead::storage {
namespace {

using json = nlohmann::json;

// A pull stores every layer: a declared size past this is a hostile or broken manifest.
constexpr uint64_t kMaxBlobBytes = uint64_t{1} << 40;
constexpr size_t kMaxLayers = 1000;
constexpr size_t kMaxIndexEntries = 1000;

Error Bad(const std::string& what) { return MakeError(ErrorCode::kInvalid, "image manifest: " + what, "invalid_image"); }

Result<json> ParseObject(std::string_view body, const char* what) {
  if (body.size() > kMaxManifestBytes) return MakeError(ErrorCode::kTooLarge, std::string(what) + " is too large", "invalid_image");
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Bad(std::string(what) + " is not a JSON object");
  return doc;
}

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t SchemaVersion(const json& object) {
  auto it = object.find("schemaVersion");
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

std::vector<std::string> StringList(const json& object, const char* key) {
  std::vector<std::string> out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) return out;
  for (const json& item : *it)
    if (item.is_string()) out.push_back(item.get<std::string>());
  return out;
}

Result<Descriptor> ParseDescriptor(const json& item, const char* what) {
  if (!item.is_object()) return Bad(std::string(what) + " is not an object");
  Descriptor d;
  d.media_type = StringField(item, "mediaType");
  d.digest = StringField(item, "digest");
  if (!IsSha256Digest(d.digest)) return Bad(std::string(what) + " has no sha256 digest (\"" + d.digest.substr(0, 80) + "\")");
  auto size = item.find("size");
  if (size == item.end() || !size->is_number_unsigned() || size->get<uint64_t>() > kMaxBlobBytes) {
    return Bad(std::string(what) + " " + d.digest + " has no valid size");
  }
  d.size = size->get<uint64_t>();
  if (auto p = item.find("platform"); p != item.end() && p->is_object()) {
    d.platform = Platform{StringField(*p, "os"), StringField(*p, "architecture"), StringField(*p, "variant")};
  }
  return d;
}

bool IsLayerType(std::string_view type) {
  return type == media_type::kOciLayer || type == media_type::kOciLayerGzip || type == media_type::kOciLayerZstd ||
         type == media_type::kDockerLayer;
}

}  // namespace

std::string ManifestAcceptHeader() {
  return std::string(media_type::kOciIndex) + ", " + media_type::kDockerList + ", " + media_type::kOciManifest + ", " +
         media_type::kDockerManifest;
}

bool IsIndexType(std::string_view type) { return type == media_type::kOciIndex || type == media_type::kDockerList; }
bool IsManifestType(std::string_view type) {
  return type == media_type::kOciManifest || type == media_type::kDockerManifest;
}

Result<std::string> ManifestMediaType(std::string_view body, std::string_view content_type) {
  auto doc = ParseObject(body, "the manifest");
  if (!doc.ok()) return doc.error();
  std::string type = StringField(*doc, "mediaType");
  if (type.empty()) type = std::string(content_type.substr(0, content_type.find(';')));
  if (type.empty() && doc->contains("manifests")) type = media_type::kOciIndex;  // OCI allows leaving it out
  if (type.empty() && doc->contains("layers")) type = media_type::kOciManifest;
  if (IsIndexType(type) || IsManifestType(type)) return type;
  if (SchemaVersion(*doc) == 1) return Bad("the Docker schema 1 format is not supported (push the image again with a current client)");
  return Bad("unsupported manifest type \"" + type.substr(0, 100) + "\"");
}

Result<ImageIndex> ParseImageIndex(std::string_view body) {
  auto doc = ParseObject(body, "the index");
  if (!doc.ok()) return doc.error();
  auto manifests = doc->find("manifests");
  if (manifests == doc->end() || !manifests->is_array()) return Bad("the index has no manifests list");
  if (manifests->size() > kMaxIndexEntries) return Bad("the index lists too many manifests");
  ImageIndex index;
  for (const json& item : *manifests) {
    auto d = ParseDescriptor(item, "an index entry");
    if (!d.ok()) return d.error();
    index.manifests.push_back(std::move(*d));
  }
  return index;
}

Result<ImageManifest> ParseImageManifest(std::string_view body, const std::string& type) {
  auto doc = ParseObject(body, "the manifest");
  if (!doc.ok()) return doc.error();
  if (SchemaVersion(*doc) != 2) return Bad("schemaVersion is not 2");
  ImageManifest manifest;
  manifest.media_type = type;
  auto config = doc->find("config");
  if (config == doc->end()) return Bad("no config");
  auto c = ParseDescriptor(*config, "the config");
  if (!c.ok()) return c.error();
  if (c->size > kMaxManifestBytes) return Bad("the config is too large");
  manifest.config = std::move(*c);
  auto layers = doc->find("layers");
  if (layers == doc->end() || !layers->is_array()) return Bad("no layers list");
  if (layers->size() > kMaxLayers) return Bad("too many layers");
  for (const json& item : *layers) {
    auto d = ParseDescriptor(item, "a layer");
    if (!d.ok()) return d.error();
    if (d->media_type.find("nondistributable") != std::string::npos || d->media_type.find("foreign") != std::string::npos) {
      return Bad("layer " + d->digest + " is a non-distributable layer (" + d->media_type + "), which is not supported");
    }
    if (!IsLayerType(d->media_type)) return Bad("layer " + d->digest + " has an unsupported type \"" + d->media_type.substr(0, 100) + "\"");
    manifest.layers.push_back(std::move(*d));
  }
  return manifest;
}

Result<ImageConfig> ParseImageConfig(std::string_view body) {
  auto doc = ParseObject(body, "the image config");
  if (!doc.ok()) return doc.error();
  ImageConfig config;
  config.os = StringField(*doc, "os");
  config.architecture = StringField(*doc, "architecture");
  if (auto c = doc->find("config"); c != doc->end() && c->is_object()) {
    config.env = StringList(*c, "Env");
    config.working_dir = StringField(*c, "WorkingDir");
    config.user = StringField(*c, "User");
    config.entrypoint = StringList(*c, "Entrypoint");
    config.cmd = StringList(*c, "Cmd");
    if (auto ports = c->find("ExposedPorts"); ports != c->end() && ports->is_object()) {
      for (const auto& [port, unused] : ports->items()) config.exposed_ports.push_back(port);
    }
    if (auto labels = c->find("Labels"); labels != c->end() && labels->is_object()) {
      for (const auto& [key, value] : labels->items())
        if (value.is_string()) config.labels[key] = value.get<std::string>();
    }
  }
  if (auto rootfs = doc->find("rootfs"); rootfs != doc->end() && rootfs->is_object()) {
    config.diff_ids = StringList(*rootfs, "diff_ids");
  }
  for (const std::string& id : config.diff_ids)
    if (!IsSha256Digest(id)) return Bad("the config's rootfs.diff_ids holds \"" + id.substr(0, 80) + "\"");
  return config;
}

Result<Descriptor> PickPlatform(const ImageIndex& index, const Platform& wanted) {
  std::string offered;
  for (const Descriptor& d : index.manifests) {
    if (!d.platform) continue;
    const Platform& p = *d.platform;
    if (p.os == wanted.os && p.architecture == wanted.architecture &&
        (wanted.variant.empty() || p.variant == wanted.variant) && IsManifestType(d.media_type)) {
      return d;
    }
    // Attestations and other artefacts are listed as unknown/unknown.
    if (p.os != "unknown") offered += (offered.empty() ? "" : ", ") + p.os + "/" + p.architecture + (p.variant.empty() ? "" : "/" + p.variant);
  }
  return MakeError(ErrorCode::kNotFound,
                   "the image has no " + wanted.os + "/" + wanted.architecture + " manifest (it has: " +
                       (offered.empty() ? "none" : offered) + ")",
                   "platform_not_found");
}

Platform HostPlatform() {
  utsname u{};
  ::uname(&u);
  std::string machine = u.machine;
  std::string arch = machine == "x86_64"    ? "amd64"
                     : machine == "aarch64" ? "arm64"
                     : machine == "i686"    ? "386"
                     : machine == "ppc64le" ? "ppc64le"
                     : machine == "s390x"   ? "s390x"
                     : machine == "riscv64" ? "riscv64"
                                            : machine;
  return Platform{"linux", arch, ""};
}

nlohmann::json ImageConfigToJson(const ImageConfig& c) {
  return {{"os", c.os},
          {"architecture", c.architecture},
          {"env", c.env},
          {"working_dir", c.working_dir},
          {"user", c.user},
          {"entrypoint", c.entrypoint},
          {"cmd", c.cmd},
          {"exposed_ports", c.exposed_ports},
          {"labels", c.labels}};
}

}  // namespace bulkhead::storage
