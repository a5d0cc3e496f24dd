#include "e2b/envd_paths.h"

#include <vector>

#include <fmt/format.h>

#include "http/encoding.h"
#include "service/file_request.h"

namespace bulkhead::e2b {

Result<std::string> ResolveEnvdPath(std::string_view path, std::string_view home) {
  auto bad = [](std::string message) { return MakeError(ErrorCode::kBadRequest, std::move(message)); };
  if (path.empty()) return bad("the path is empty");
  if (path.find('\0') != std::string_view::npos) return bad("the path contains a NUL byte");
  if (path.size() > api::kMaxFilePathBytes) return bad(fmt::format("the path is longer than {} bytes", api::kMaxFilePathBytes));
  if (!api::IsValidUtf8(path)) return bad("the path is not valid UTF-8");
  std::string joined;
  if (path[0] == '~') {
    if (path.size() > 1 && path[1] != '/') {
      return bad(fmt::format("cannot expand the path '{}': only ~ (the user's home) is known", path));
    }
    joined = std::string(home) + "/" + std::string(path.substr(1));
  } else if (path[0] == '/') {
    joined = std::string(path);
  } else {
    joined = std::string(home) + "/" + std::string(path);
  }
  std::string clean = CleanAbsolutePath(joined);
  if (clean.size() > api::kMaxFilePathBytes) return bad(fmt::format("the path is longer than {} bytes", api::kMaxFilePathBytes));
  return clean;
}

std::string BaseName(std::string_view clean_path) {
  if (clean_path == "/" || clean_path.empty()) return "/";
  const size_t slash = clean_path.rfind('/');
  return std::string(slash == std::string_view::npos ? clean_path : clean_path.substr(slash + 1));
}

std::string DirName(std::string_view clean_path) {
  const size_t slash = clean_path.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return "/";
  return std::string(clean_path.substr(0, slash));
}

std::string RelativeTo(std::string_view dir, std::string_view path) {
  if (path == dir) return ".";
  if (dir == "/") return path.starts_with('/') ? std::string(path.substr(1)) : std::string(path);
  if (path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/') {
    return std::string(path.substr(dir.size() + 1));
  }
  return std::string(path);
}

}  // namespace bulkhead::e2b
