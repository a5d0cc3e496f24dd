#include "init/file_worker.h"
#include "common/time_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <vector>

namespace bulkhead::init {
namespace {

using nlohmann::json;

constexpr size_t kMaxPathBytes = 4096;

std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

ErrorCode HttpCodeOf(std::string_view code) {
  if (code == "not_found") return ErrorCode::kNotFound;
  if (code == "exists" || code == "not_a_directory" || code == "is_a_directory" || code == "not_empty") {
    return ErrorCode::kConflict;
  }
  if (code == "permission_denied" || code == "read_only") return ErrorCode::kForbidden;
  if (code == "disk_full") return ErrorCode::kDiskFull;
  if (code == "invalid_argument") return ErrorCode::kInvalid;
  if (code == "too_large") return ErrorCode::kTooLarge;
  return ErrorCode::kInternal;
}

const char* CodeOfErrno(int err) {
  switch (err) {
    case ENOENT: return "not_found";
    case EEXIST: return "exists";
    case ENOTDIR: return "not_a_directory";
    case EISDIR: return "is_a_directory";
    case ENOTEMPTY: return "not_empty";
    case EACCES:
    case EPERM: return "permission_denied";
    case EROFS: return "read_only";
    case ENOSPC:
    case EDQUOT: return "disk_full";
    case EFBIG: return "too_large";
    case EINVAL:
    case ELOOP:
    case ENAMETOOLONG:
    case EXDEV:  // a move across mounts: the request cannot be done, nothing broke
    case EBUSY:  // moving or removing a mount point or the root: likewise
      return "invalid_argument";
    default: return "internal";
  }
}

const char* TypeName(mode_t mode) {
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "dir";
  if (S_ISLNK(mode)) return "symlink";
  return "other";
}

Result<std::string> ReadLinkAt(int dir_fd, const std::string& name, const std::string& path) {
  std::string target(PATH_MAX, '\0');
  while (true) {
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
    if (n < 0) return ErrnoError(errno, "readlink", path);
    if (size_t(n) < target.size()) {
      target.resize(size_t(n));
      return target;
    }
    target.resize(target.size() * 2);
  }
}

Status Dispatch(const std::string& file_op_json) {
  json doc = json::parse(file_op_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return FileError("invalid_argument", "file_op is not a JSON object");
  auto op = doc.find("op");
  if (op == doc.end() || !op->is_string()) return FileError("invalid_argument", "file_op needs an \"op\" string");
  static const std::map<std::string, std::function<Status(const FileOpArgs&)>, std::less<>> kOps = {
      {"read", ReadFileOp},
      {"write", WriteFileOp},
      {"stat", StatOp},
      {"list", ListOp},
      {"mkdir", MkdirOp},
      {"move", MoveOp},
      {"remove", RemoveOp},
      {"archive_create", ArchiveCreateOp},
      {"archive_extract", ArchiveExtractOp},
      {"watch", WatchOp},
      {"connect", ConnectOp},
  };
  auto it = kOps.find(op->get<std::string>());
  if (it == kOps.end()) return FileError("invalid_argument", "unknown file operation \"" + op->get<std::string>() + "\"");
  return it->second(FileOpArgs(doc));
}

}  // namespace

int RunFileOp(const std::string& file_op_json) {
  ::umask(0);  // every file and directory the worker creates gets an explicit mode
  Status status;
  try {
    status = Dispatch(file_op_json);
  } catch (const std::exception& e) {  // std::bad_alloc, or a bug
    status = FileError("internal", std::string("file operation failed: ") + e.what());
  }
  if (status.ok()) return 0;
  std::string line = Dump(json{{"code", FileErrorCode(status.error())}, {"message", status.error().message}}) + "\n";
  (void)WriteAll(2, line);
  return 1;
}

Error FileError(std::string_view code, std::string message) {
  return MakeError(HttpCodeOf(code), std::move(message), std::string(code));
}

Error ErrnoError(int err, std::string_view what, std::string_view path) {
  return FileError(CodeOfErrno(err), std::string(what) + " " + std::string(path) + ": " + std::strerror(err));
}

std::string FileErrorCode(const Error& error) { return error.detail_code.empty() ? "internal" : error.detail_code; }

Result<std::string> FileOpArgs::Path(const char* key) const {
  auto it = doc_.find(key);
  if (it == doc_.end() || !it->is_string()) return FileError("invalid_argument", std::string("\"") + key + "\" must be a path");
  const std::string& raw = it->get_ref<const std::string&>();
  if (raw.empty() || raw[0] != '/') return FileError("invalid_argument", std::string("\"") + key + "\" must be an absolute path");
  if (raw.find('\0') != std::string::npos) return FileError("invalid_argument", std::string("\"") + key + "\" contains a NUL byte");
  if (raw.size() > kMaxPathBytes) return FileError("invalid_argument", std::string("\"") + key + "\" is longer than 4096 bytes");
  std::string path;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('/', start);
    if (end == std::string::npos) end = raw.size();
    std::string_view part(raw.data() + start, end - start);
    if (!part.empty() && part != ".") {
      path += '/';
      path += part;
    }
    start = end + 1;
  }
  return path.empty() ? std::string("/") : path;
}

Result<bool> FileOpArgs::Bool(const char* key, bool fallback) const {
  auto it = doc_.find(key);
  if (it == doc_.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FileError("invalid_argument", std::string("\"") + key + "\" must be a boolean");
  return it->get<bool>();
}

Result<std::optional<mode_t>> FileOpArgs::Mode(const char* key) const {
  auto it = doc_.find(key);
  if (it == doc_.end() || it->is_null()) return std::optional<mode_t>();
  if (!it->is_number_unsigned() || it->get<uint64_t>() > 07777) {
    return FileError("invalid_argument", std::string("\"") + key + "\" must be permission bits (0..07777)");
  }
  return std::optional<mode_t>(mode_t(it->get<uint64_t>()));
}

Result<std::optional<FileOwner>> FileOpArgs::Owner(const char* key) const {
  auto it = doc_.find(key);
  if (it == doc_.end() || it->is_null()) return std::optional<FileOwner>();
  auto id = [&](const char* field) -> std::optional<uint32_t> {
    if (!it->is_object()) return std::nullopt;
    auto value = it->find(field);
    if (value == it->end() || !value->is_number_unsigned() || value->get<uint64_t>() > UINT32_MAX - 1) return std::nullopt;
    return uint32_t(value->get<uint64_t>());
  };
  std::optional<uint32_t> uid = id("uid"), gid = id("gid");
  if (!uid || !gid) return FileError("invalid_argument", std::string("\"") + key + "\" must be {\"uid\": N, \"gid\": N}");
  return std::optional<FileOwner>(FileOwner{uid_t(*uid), gid_t(*gid)});
}

Result<std::string> FileOpArgs::String(const char* key, size_t max_bytes) const {
  auto it = doc_.find(key);
  if (it == doc_.end() || it->is_null()) return std::string();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > max_bytes) {
    return FileError("invalid_argument",
                     std::string("\"") + key + "\" must be a string of at most " + std::to_string(max_bytes) + " bytes");
  }
  return it->get<std::string>();
}

Result<std::map<std::string, std::string>> FileOpArgs::StringMap(const char* key) const {
  std::map<std::string, std::string> map;
  auto it = doc_.find(key);
  if (it == doc_.end() || it->is_null()) return map;
  auto bad = [&] { return FileError("invalid_argument", std::string("\"") + key + "\" must be an object of strings"); };
  if (!it->is_object()) return bad();
  for (const auto& [name, value] : it->items()) {
    if (!value.is_string()) return bad();
    map.emplace(name, value.get<std::string>());
  }
  return map;
}

Result<int> FileOpArgs::Int(const char* key, int fallback, int min, int max) const {
  auto it = doc_.find(key);
  if (it == doc_.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max) {
    return FileError("invalid_argument",
                     std::string("\"") + key + "\" must be an integer in " + std::to_string(min) + ".." + std::to_string(max));
  }
  return int(it->get<int64_t>());
}

namespace {

// A directory's st_size means something else on every filesystem (0 or the bytes of its names
// on btrfs, a multiple of the block size on ext4, a count on tmpfs): its size is the space it
// takes, at least one block (small directories live inside their inode on btrfs and xfs).
uint64_t SizeOf(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return uint64_t(st.st_size);
  return std::max(uint64_t(st.st_blocks) * 512, uint64_t(st.st_blksize));
}

// "resolved", "target_type" and "target_mode" of the symlink `path`: every link followed, as
// any program in the sandbox would. Absent where it leads nowhere (dangling, a loop).
void AddResolvedTarget(const std::string& path, json& entry) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) != nullptr) entry["resolved"] = std::string(resolved);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;
  entry["target_type"] = TypeName(st.st_mode);
  entry["target_mode"] = st.st_mode & 07777;
}

// JSON strings must be UTF-8; an attribute that is not (set by some program) is left out.
bool IsUtf8(const std::string& text) {
  try {
    (void)json(text).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// "xattrs": the extended attributes of `path` (through a symlink) whose names start with
// `prefix`, the prefix stripped. Best effort, like the rest of a listing: none where the
// filesystem has none or they cannot be read.
void AddXattrs(const std::string& path, const std::string& prefix, json& entry) {
  std::string names;
  for (;;) {
    ssize_t size = ::listxattr(path.c_str(), nullptr, 0);
    if (size <= 0) return;
    names.resize(size_t(size));
    size = ::listxattr(path.c_str(), names.data(), names.size());
    if (size >= 0) {
      names.resize(size_t(size));
      break;
    }
    if (errno != ERANGE) return;  // ERANGE: more names appeared meanwhile
  }
  json xattrs = json::object();
  for (size_t start = 0; start < names.size();) {
    const std::string name(names.c_str() + start);
    start += name.size() + 1;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const ssize_t size = ::getxattr(path.c_str(), name.c_str(), nullptr, 0);
    if (size < 0) continue;  // removed meanwhile
    std::string value(size_t(size), '\0');
    const ssize_t got = ::getxattr(path.c_str(), name.c_str(), value.data(), value.size());
    if (got < 0) continue;  // removed, or grown, meanwhile
    value.resize(size_t(got));
    std::string key = name.substr(prefix.size());
    if (IsUtf8(key) && IsUtf8(value)) xattrs[key] = std::move(value);
  }
  if (!xattrs.empty()) entry["xattrs"] = std::move(xattrs);
}

}  // namespace

json EntryJson(const std::string& path, const struct stat& st, const std::optional<std::string>& target) {
  std::string name = path == "/" ? "/" : path.substr(path.rfind('/') + 1);
  json entry = {{"path", path},
                {"name", name},
                {"type", TypeName(st.st_mode)},
                {"size", SizeOf(st)},
                {"mode", st.st_mode & 07777},
                {"uid", st.st_uid},
                {"gid", st.st_gid},
                {"mtime", Rfc3339Millis(st.st_mtim)}};
  if (target) entry["target"] = *target;
  return entry;
}

Result<EntryDetails> EntryDetailsOf(const FileOpArgs& args) {
  EntryDetails details;
  auto resolve = args.Bool("resolve_links", false);
  if (!resolve.ok()) return resolve.error();
  details.resolve_links = *resolve;
  auto prefix = args.String("xattr_prefix", XATTR_NAME_MAX);
  if (!prefix.ok()) return prefix.error();
  details.xattr_prefix = std::move(*prefix);
  return details;
}

Result<json> EntryAt(int dir_fd, const std::string& name, const std::string& path, const EntryDetails& details) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError(errno, "stat", path);
  std::optional<std::string> target;
  if (S_ISLNK(st.st_mode)) {
    auto link = ReadLinkAt(dir_fd, name, path);
    if (!link.ok()) return link.error();
    target = std::move(*link);
  }
  json entry = EntryJson(path, st, target);
  if (details.resolve_links && S_ISLNK(st.st_mode)) AddResolvedTarget(path, entry);
  if (!details.xattr_prefix.empty()) AddXattrs(path, details.xattr_prefix, entry);
  return entry;
}

Result<json> EntryOf(const std::string& path, const EntryDetails& details) {
  return EntryAt(AT_FDCWD, path, path, details);
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileError("internal", std::string("write to the connection: ") + std::strerror(errno));
    data.remove_prefix(size_t(n));
  }
  return {};
}

Status WriteJsonLine(const json& value) { return WriteAll(1, Dump(value) + "\n"); }

std::pair<std::string, std::string> SplitParent(const std::string& path) {
  size_t slash = path.rfind('/');
  return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

Result<std::vector<std::string>> DirectoryNames(int dir_fd, const std::string& path) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // a fresh offset, and readable if dir_fd is O_PATH
  if (fd < 0) return ErrnoError(errno, "open", path);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    ::close(fd);
    return ErrnoError(err, "read directory", path);
  }
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoError(err, "read directory", path);
  std::sort(names.begin(), names.end());
  return names;
}

Status MakeDirectories(const std::string& path, mode_t mode, bool path_is_a_parent, const std::optional<FileOwner>& owner) {
  // Each prefix in turn: mkdir, and an existing one must be a directory (following a symlink,
  // as any program in the sandbox would).
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    std::string prefix = path.substr(0, pos);
    if (prefix.empty() || prefix == "/") continue;
    bool last = pos == std::string::npos;
    if (::mkdir(prefix.c_str(), last ? mode : 0755) == 0) {
      // lchown: what is there now is not followed if it was swapped for a symlink.
      if (owner && ::lchown(prefix.c_str(), owner->uid, owner->gid) != 0) return ErrnoError(errno, "chown", prefix);
      continue;
    }
    int err = errno;
    struct stat st;
    if (::stat(prefix.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      if (err == EEXIST) err = last && !path_is_a_parent ? EEXIST : ENOTDIR;
    }
    return ErrnoError(err, "mkdir", prefix);
  }
  return {};
}

}  // namespace bulkhead::init
