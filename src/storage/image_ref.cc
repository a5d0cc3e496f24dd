#include "storage/image_ref.h"

#include <cctype>

namespace bulkhead::storage {
namespace {

// The distribution spec's limits: a repository name (with its registry) of at most 255
// characters, a tag of at most 128.
constexpr size_t kMaxName = 255, kMaxTag = 128;

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool Alnum(char c) { return LowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool PathComponent(std::string_view part) {
  if (part.empty() || !LowerAlnum(part.front()) || !LowerAlnum(part.back())) return false;
  for (size_t i = 0; i < part.size();) {
    if (LowerAlnum(part[i])) {
      i++;
      continue;
    }
    // A separator: one '.', one or two '_', or any run of '-'; an alphanumeric follows it.
    size_t run = 1;
    if (part[i] == '-') {
      while (i + run < part.size() && part[i + run] == '-') run++;
    } else if (part[i] == '_') {
      if (i + 1 < part.size() && part[i + 1] == '_') run = 2;
    } else if (part[i] != '.') {
      return false;
    }
    i += run;
    if (i >= part.size() || !LowerAlnum(part[i])) return false;
  }
  return true;
}

// A host name's labels ([A-Za-z0-9] with inner '-'), dot-separated, or a bracketed IPv6
// address; then an optional ":port".
bool Registry(std::string_view host) {
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos || close < 3) return false;
    for (char c : host.substr(1, close - 1))
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) return false;
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    port = rest.empty() ? rest : rest.substr(1);
    if (!rest.empty() && port.empty()) return false;
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      if (port.empty()) return false;
      host = host.substr(0, colon);
    }
    if (host.empty()) return false;
    size_t start = 0;
    while (true) {
      const size_t dot = host.find('.', start);
      std::string_view label = host.substr(start, dot == std::string_view::npos ? dot : dot - start);
      if (label.empty() || !Alnum(label.front()) || !Alnum(label.back())) return false;
      for (char c : label)
        if (!Alnum(c) && c != '-') return false;
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
  }
  if (port.size() > 5) return false;
  for (char c : port)
    if (c < '0' || c > '9') return false;
  return true;
}

Error Invalid(std::string_view text, const std::string& why) {
  return MakeError(ErrorCode::kInvalid, "image reference \"" + std::string(text) + "\": " + why,
                   "invalid_image_reference");
}

}  // namespace

std::string ImageRef::ToString() const {
  std::string text = registry + "/" + repository;
  if (!tag.empty()) text += ":" + tag;
  if (!digest.empty()) text += "@" + digest;
  return text;
}

bool IsSha256Digest(std::string_view digest) {
  if (digest.size() != 7 + 64 || !digest.starts_with("sha256:")) return false;
  for (char c : digest.substr(7))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool IsRegistryReference(std::string_view name) { return name.find_first_of("/:@") != std::string_view::npos; }

Result<ImageRef> ParseImageRef(std::string_view text, std::string_view default_registry) {
  if (text.empty()) return Invalid(text, "empty");
  if (text.size() > kMaxName + 1 + kMaxTag + 1 + 7 + 64) return Invalid(text.substr(0, 64), "too long");
  ImageRef ref;
  std::string_view name = text;
  if (const size_t at = name.find('@'); at != std::string_view::npos) {
    const std::string_view digest = name.substr(at + 1);
    if (!IsSha256Digest(digest))
      return Invalid(text, "only sha256 digests are taken (\"@sha256:\" and 64 lowercase hex digits)");
    ref.digest = std::string(digest);
    name = name.substr(0, at);
  }
  // A tag is after the last ':' that follows the last '/' (a ':' before it is a registry's port).
  const size_t slash = name.rfind('/');
  if (const size_t colon = name.rfind(':'); colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    const std::string_view tag = name.substr(colon + 1);
    if (tag.empty() || tag.size() > kMaxTag || !(Alnum(tag.front()) || tag.front() == '_'))
      return Invalid(text, "a tag is 1 to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'");
    for (char c : tag)
      if (!Alnum(c) && c != '_' && c != '.' && c != '-')
        return Invalid(text, "a tag is 1 to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'");
    ref.tag = std::string(tag);
    name = name.substr(0, colon);
  }
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";

  // The first component names a registry if it could not be a path component.
  std::string_view repository = name;
  const size_t first = name.find('/');
  const std::string_view head = name.substr(0, first);
  if (first != std::string_view::npos &&
      (head.find_first_of(".:[") != std::string_view::npos || head == "localhost")) {
    if (!Registry(head)) return Invalid(text, "\"" + std::string(head) + "\" is no registry host[:port]");
    ref.registry = std::string(head);
    repository = name.substr(first + 1);
  } else {
    if (default_registry.empty())
      return Invalid(text, "it names no registry (registry.example/team/image:tag), and the daemon has no default "
                           "registry (serve --default-registry)");
    ref.registry = std::string(default_registry);
    if (first == std::string_view::npos) ref.repository = "library/";
  }
  size_t start = 0;
  while (true) {
    const size_t next = repository.find('/', start);
    const std::string_view part = repository.substr(start, next == std::string_view::npos ? next : next - start);
    if (!PathComponent(part))
      return Invalid(text, "\"" + std::string(part) +
                               "\" is no repository path component (lowercase letters and digits, joined by "
                               "'.', '_', '__' or dashes)");
    if (next == std::string_view::npos) break;
    start = next + 1;
  }
  ref.repository += repository;
  if (ref.registry.size() + 1 + ref.repository.size() > kMaxName) return Invalid(text, "the name is over 255 characters");
  return ref;
}

}  // namespace bulkhead::storage
