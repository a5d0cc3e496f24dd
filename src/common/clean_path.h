// Absolute paths made clean, as a Linux path resolves without links: the E2B front's paths, a
// Dockerfile's WORKDIR and COPY destinations.
#pragma once
#include <string>
#include <string_view>

namespace bulkhead {

// `path` as an absolute path with no empty, "." or ".." parts ("/.." is "/"; "a/./b" is "/a/b").
std::string CleanAbsolutePath(std::string_view path);

}  // namespace bulkhead
