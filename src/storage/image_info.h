// What the storage knows of an image; the core hands it on as core::ImageInfo (core/types.h).
#pragma once
#include <cstdint>
#include <string>

namespace bulkhead::storage {

// Images that sandboxes start from.
struct ImageInfo {
  std::string name;
  std::string source;  // "host" | "directory" | "tarball"
  std::string created_at;
  int64_t size_bytes = 0;
};

}  // namespace bulkhead::storage
