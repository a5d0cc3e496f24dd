// A reference to an image in a registry that speaks the OCI distribution API, in the grammar
// docker and skopeo read: [REGISTRY/]REPOSITORY[:TAG][@DIGEST]. Parsed strictly (every part
// checked against the spec's character classes and lengths), since its parts end up in URLs.
#pragma once
#include <string>
#include <string_view>

#include "common/result.h"

namespace bulkhead::storage {

struct ImageRef {
  std::string registry;    // host[:port], or [ipv6]:port
  std::string repository;  // lowercase path components: "team/py"
  std::string tag;         // "latest" when neither a tag nor a digest is named; "" with a digest alone
  std::string digest;      // "sha256:" and 64 lowercase hex digits, or ""

  // What a manifest request names: the digest where there is one (it pins the tag), else the tag.
  const std::string& Reference() const { return digest.empty() ? tag : digest; }
  // The canonical text: registry/repository[:tag][@digest].
  std::string ToString() const;
};

// Parses `text`. A name whose first component is no registry (it has no '.' or ':' and is not
// "localhost") is on `default_registry`, where a single component gets "library/" before it,
// as registries that mirror the common public one expect; with no default registry such a
// name is refused. kInvalid (400) says which part is wrong.
Result<ImageRef> ParseImageRef(std::string_view text, std::string_view default_registry);

// "sha256:" and 64 lowercase hex digits: the only digests bulkhead takes or stores.
bool IsSha256Digest(std::string_view digest);

// Whether `name` names an image in a registry rather than one stored here by name ("host", an
// imported rootfs): it has a '/', ':' or '@', which local image names never have.
bool IsRegistryReference(std::string_view name);

}  // namespace bulkhead::storage
