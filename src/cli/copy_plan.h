// `bulkhead cp`'s decisions, free of I/O: which side of the copy is in a sandbox, and
// where the copy lands, following docker cp's rules.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bulkhead::cli {

// One side of `bulkhead cp`: "ID:PATH" in a sandbox, "-" for stdin/stdout, else a local path.
struct CopyLocation {
  enum class Kind { kLocal, kSandbox, kStdio };
  Kind kind = Kind::kLocal;
  std::string sandbox_id;  // kSandbox
  std::string path;        // kLocal, kSandbox ("." when "ID:" gave none: the sandbox's workdir)
};

// Like docker cp: an argument is in a sandbox when it has a ':' with a non-empty id before
// it that holds no '/', and does not start with '/' or '.' (write ./a:b for a local file
// with a colon in its name).
CopyLocation ParseCopyLocation(std::string_view argument);

// What is at the destination path before the copy.
enum class PathKind { kMissing, kFile, kDirectory };

// Where a single file lands: into an existing directory under the source's name, else at
// the destination itself. A destination ending in '/' must be an existing directory; an
// existing non-directory is replaced.
Result<std::string> FileCopyDestination(const std::string& source, const std::string& destination,
                                        PathKind destination_kind);

// Where a directory's contents are unpacked: a missing destination becomes the copy; into
// an existing directory the source goes as a subdirectory of its own name, or its contents
// go straight in when the source ends in "/."; a file is not a place for a directory.
Result<std::string> DirectoryCopyDestination(const std::string& source, const std::string& destination,
                                             PathKind destination_kind);

// The last component of a path, ignoring trailing slashes and a trailing "/.":
// "a/b/" -> "b", "a/b/." -> "b", "/" -> "/".
std::string BaseName(std::string_view path);

// "dir" + "name" -> "dir/name" (no doubled slash).
std::string JoinPath(std::string_view directory, std::string_view name);

// "a/b/." -> "a/b", "a/." -> "a", "." stays "."; other paths as given minus trailing slashes.
std::string WithoutTrailingDot(std::string_view path);

}  // namespace bulkhead::cli
