// Paths as envd takes them (infra permissions/path.go): "~" and "~/x" are the user's home,
// a relative path is relative to it, and the result is cleaned lexically. Cleaning cannot
// let a path escape anything: the worker that uses it runs inside the sandbox, where ".."
// and symlinks reach only what the sandbox itself reaches.
#pragma once
#include <string>
#include <string_view>

#include "common/clean_path.h"
#include "common/result.h"

namespace bulkhead::e2b {


// The absolute path `path` names for a user whose home is `home`. 400 (kBadRequest) for an
// empty path, "~other" (another user's home), a NUL byte, a path over 4096 bytes or one that
// is not UTF-8.
Result<std::string> ResolveEnvdPath(std::string_view path, std::string_view home);

// The last component ("/" for "/").
std::string BaseName(std::string_view clean_path);
// The directory holding it ("/" for "/" and "/x").
std::string DirName(std::string_view clean_path);
// `path` relative to the directory `dir` (both clean and absolute), as Go's filepath.Rel
// answers for a path inside it: "a/b" for "/d/a/b" under "/d", "." for "/d" itself. A path
// outside `dir` is answered whole.
std::string RelativeTo(std::string_view dir, std::string_view path);

}  // namespace bulkhead::e2b
