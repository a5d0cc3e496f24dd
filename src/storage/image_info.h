// What the storage knows of an image; the core hands it on as core::ImageInfo (core/types.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "storage/oci_manifest.h"

namespace bulkhead::storage {

// Images that sandboxes start from.
struct ImageInfo {
  std::string name;
  std::string source;  // "host" | "directory" | "tarball" | "registry" | "build"
  std::string created_at;
  int64_t size_bytes = 0;
  // Pulled images (image_pull.h): the manifest's digest, the references that name the image
  // (registry/repository:tag), and what its config says to run with.
  std::string digest;
  std::vector<std::string> references;
  std::optional<ImageConfig> config;
  bool host_base = false;  // a build FROM host: its sandboxes get the host image's directories
  // Who holds it. The host's images (`shared`) are every tenant's to run; a tenant's own (pulled,
  // built or imported with its key) are its alone. `references` are the host's names for it;
  // each tenant that holds it names it in a namespace of its own (`tenants`). A tenant that
  // did not store it never learns which others did (ImageSeenBy).
  bool shared = true;
  std::map<std::string, std::vector<std::string>> tenants;  // tenant -> its references
};

// Whether `tenant` ("" for the host) stored the image itself, and whether it may run it (its
// own, or the host's).
inline bool HoldsImage(const ImageInfo& image, const std::string& tenant) {
  return tenant.empty() ? image.shared : image.tenants.contains(tenant);
}
inline bool SeesImage(const ImageInfo& image, const std::string& tenant) {
  return image.shared || HoldsImage(image, tenant);
}
// The image as `tenant` sees it: its own names first, then the host's; other tenants left out.
inline ImageInfo ImageSeenBy(ImageInfo image, const std::string& tenant) {
  if (tenant.empty()) return image;
  std::vector<std::string> references;
  if (auto own = image.tenants.find(tenant); own != image.tenants.end()) references = own->second;
  if (image.shared)
    for (const std::string& reference : image.references)
      if (std::find(references.begin(), references.end(), reference) == references.end()) references.push_back(reference);
  image.references = std::move(references);
  image.tenants.clear();
  return image;
}

// What a pull stores besides the tree, and what garbage collection keeps its blobs by.
struct PulledImage {
  std::string manifest_digest;
  std::string manifest_media_type;
  std::string index_digest;  // "" when the reference named the manifest itself
  std::string config_digest;
  ImageConfig config;
  std::vector<std::string> layers;  // digests, bottom first
};

// What a build stores besides the tree.
struct BuiltImage {
  std::string build_key;  // "sha256:" + hex of everything the result depends on
  ImageConfig config;
  bool host_base = false;  // FROM host: its sandboxes get the host image's directories
};

// A pulled image's directory name under images/: its manifest digest's 64 hex digits.
inline std::string ImageDirName(const std::string& manifest_digest) { return manifest_digest.substr(7); }

}  // namespace bulkhead::storage
