#include "service/api_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "common/random_hex.h"
#include "common/unique_fd.h"

namespace bulkhead::api {
namespace {

constexpr size_t kKeyBytes = 32;
constexpr size_t kE2bKeyBytes = 20;  // E2B's keys are "e2b_" and 40 hex digits
constexpr size_t kMaxKeyFileBytes = 4096;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Reads an existing key file. nullopt-like NotFound if it does not exist.
Result<std::string> ReadKeyFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return MakeError(ErrorCode::kNotFound, path + " does not exist");
    return SystemError("open " + path, errno);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return SystemError("fstat " + path, errno);
  if (!S_ISREG(st.st_mode)) return MakeError(ErrorCode::kInternal, path + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    spdlog::warn("{} is readable by others (mode {:o}); it should be 0600", path, st.st_mode & 0777);
  }
  std::string content(kMaxKeyFileBytes, '\0');
  size_t length = 0;
  while (length < content.size()) {
    const ssize_t n = read(fd.get(), content.data() + length, content.size() - length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("read " + path, errno);
    }
    if (n == 0) break;
    length += size_t(n);
  }
  const std::string_view key = Trim(std::string_view(content).substr(0, length));
  if (key.empty()) return MakeError(ErrorCode::kInternal, path + " is empty; delete it to get a new key");
  return std::string(key);
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("write", errno);
    }
    data.remove_prefix(size_t(n));
  }
  return {};
}

// The key in the file `name` under `state_dir`; created on first start as `prefix` and
// `random_bytes` random bytes in hex, mode 0600. Creation is atomic: a complete file appears
// under its final name or none does, and of two daemons starting at once both end up with
// the same key.
Result<std::string> LoadOrCreateKeyFile(const std::string& state_dir, const std::string& name,
                                        std::string_view prefix, size_t random_bytes) {
  const std::string path = state_dir + "/" + name;
  auto existing = ReadKeyFile(path);
  if (existing.ok() || existing.error().code != ErrorCode::kNotFound) return existing;

  auto random = RandomHex(random_bytes);
  if (!random.ok()) return random.error();
  const std::string key = std::string(prefix) + *random;
  // Write a temporary file, then link() it into place: link fails if another daemon got
  // there first, in which case its key wins and is read back.
  std::string temp_path = state_dir + "/." + name + ".XXXXXX";
  UniqueFd fd(mkostemp(temp_path.data(), O_CLOEXEC));  // mode 0600
  if (!fd) return SystemError("create " + temp_path, errno);
  struct TempFile {
    std::string path;
    ~TempFile() { unlink(path.c_str()); }
  } temp{temp_path};
  BH_TRY(WriteAll(fd.get(), key + "\n"));
  if (fsync(fd.get()) != 0) return SystemError("fsync " + temp_path, errno);
  if (link(temp_path.c_str(), path.c_str()) != 0) {
    if (errno == EEXIST) return ReadKeyFile(path);
    return SystemError("link " + path, errno);
  }
  spdlog::info("wrote a new key to {}", path);
  return key;
}

}  // namespace

Result<std::string> LoadOrCreateApiKey(const std::string& state_dir, const std::string& configured_key) {
  if (!configured_key.empty()) return configured_key;
  return LoadOrCreateKeyFile(state_dir, "api-key", "", kKeyBytes);
}

Result<std::string> LoadOrCreateMemoryImageKey(const std::string& state_dir) {
  return LoadOrCreateKeyFile(state_dir, "memory-image-key", "", kKeyBytes);
}

Result<std::string> LoadOrCreateE2bKey(const std::string& state_dir) {
  return LoadOrCreateKeyFile(state_dir, "e2b-api-key", "e2b_", kE2bKeyBytes);
}

std::optional<std::string_view> BearerToken(std::string_view authorization) {
  static constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    // The scheme is case-insensitive (RFC 9110 section 11.1).
    if ((authorization[i] | 0x20) != kScheme[i]) return std::nullopt;
  }
  std::string_view token = authorization.substr(kScheme.size());
  if (token.front() != ' ') return std::nullopt;
  return Trim(token);
}

bool IsAuthorized(std::string_view authorization, std::string_view key) {
  auto token = BearerToken(authorization);
  return !key.empty() && token && ConstantTimeEquals(*token, key);
}

}  // namespace bulkhead::api
