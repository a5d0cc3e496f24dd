#include "cli/copy_plan.h"

namespace bulkhead::cli {
namespace {

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// "dir/." or "." (docker's "copy the contents" form).
bool MeansContents(std::string_view path) { return path == "." || EndsWith(path, "/."); }

// A source whose name cannot become a new entry ("/", "..") is copied as its contents.
bool CopiedAsContents(std::string_view source) {
  std::string name = BaseName(source);
  return MeansContents(source) || name == "/" || name == "." || name == "..";
}

Error CopyError(std::string message, std::string code) {
  return MakeError(ErrorCode::kBadRequest, std::move(message), std::move(code));
}

}  // namespace

CopyLocation ParseCopyLocation(std::string_view argument) {
  CopyLocation location;
  if (argument == "-") {
    location.kind = CopyLocation::Kind::kStdio;
    return location;
  }
  size_t colon = argument.find(':');
  bool local_form = argument.empty() || argument[0] == '/' || argument[0] == '.';
  if (local_form || colon == std::string_view::npos || colon == 0 ||
      argument.substr(0, colon).find('/') != std::string_view::npos) {
    location.path = std::string(argument);
    return location;
  }
  location.kind = CopyLocation::Kind::kSandbox;
  location.sandbox_id = std::string(argument.substr(0, colon));
  location.path = std::string(argument.substr(colon + 1));
  if (location.path.empty()) location.path = ".";
  return location;
}

std::string BaseName(std::string_view path) {
  std::string trimmed = WithoutTrailingDot(path);
  if (trimmed == "/") return trimmed;
  size_t slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

std::string JoinPath(std::string_view directory, std::string_view name) {
  std::string joined(directory);
  if (joined.empty()) return std::string(name);
  if (joined.back() != '/') joined += '/';
  return joined + std::string(name);
}

std::string WithoutTrailingDot(std::string_view path) {
  std::string_view trimmed = path;
  for (;;) {
    if (trimmed.size() > 1 && trimmed.back() == '/') {
      trimmed.remove_suffix(1);
    } else if (EndsWith(trimmed, "/.")) {
      trimmed.remove_suffix(1);  // the slash goes next, unless it is the root
    } else {
      break;
    }
  }
  return std::string(trimmed);
}

Result<std::string> FileCopyDestination(const std::string& source, const std::string& destination,
                                        PathKind destination_kind) {
  switch (destination_kind) {
    case PathKind::kDirectory: return JoinPath(destination, BaseName(source));
    case PathKind::kMissing:
      if (EndsWith(destination, "/") || MeansContents(destination)) {
        return CopyError("destination directory " + destination + " does not exist", "not_found");
      }
      return destination;
    case PathKind::kFile:
      if (EndsWith(destination, "/") || MeansContents(destination)) {
        return CopyError("destination " + destination + " is not a directory", "not_a_directory");
      }
      return destination;
  }
  return destination;
}

Result<std::string> DirectoryCopyDestination(const std::string& source, const std::string& destination,
                                             PathKind destination_kind) {
  switch (destination_kind) {
    case PathKind::kDirectory:
      if (CopiedAsContents(source)) return WithoutTrailingDot(destination);
      return JoinPath(WithoutTrailingDot(destination), BaseName(source));
    case PathKind::kMissing: return WithoutTrailingDot(destination);
    case PathKind::kFile:
      return CopyError("cannot copy directory " + source + " onto file " + destination, "not_a_directory");
  }
  return destination;
}

}  // namespace bulkhead::cli
