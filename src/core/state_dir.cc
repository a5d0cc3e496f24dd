#include "core/state_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include "common/unique_fd.h"

namespace bulkhead::core {
namespace {

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// An ancestor only root or we can change: otherwise its owner could move the state dir away
// and put one of their own in its place.
Status CheckAncestors(const std::string& resolved) {
  const uid_t self = ::geteuid();
  for (std::filesystem::path dir = std::filesystem::path(resolved).parent_path();; dir = dir.parent_path()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return SystemError("stat " + dir.string(), errno);
    if (st.st_uid != 0 && st.st_uid != self) {
      return MakeError(ErrorCode::kInvalid, "state dir " + resolved + ": its parent " + dir.string() +
                                                " belongs to uid " + std::to_string(st.st_uid) +
                                                ", who could replace it; use a state dir below directories owned by root");
    }
    if ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return MakeError(ErrorCode::kInvalid, "state dir " + resolved + ": its parent " + dir.string() + " (mode " +
                                                Octal(st.st_mode) +
                                                ") is writable by others, who could replace it; chmod go-w it");
    }
    if (dir == dir.root_path()) return {};
  }
}

Status Tighten(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return SystemError("stat " + what, errno);
  if ((st.st_mode & 077) == 0) return {};
  if (::fchmod(fd, st.st_mode & 07700) != 0) return SystemError("chmod " + what, errno);
  return {};
}

}  // namespace

Status SecureStateDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    if (errno != ENOENT) return SystemError("mkdir " + path, errno);
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    if (ec) return MakeError(ErrorCode::kInternal, "create the parents of " + path + ": " + ec.message());
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + path, errno);
  }
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return SystemError("realpath " + path, errno);
  UniqueFd dir(::open(resolved, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return SystemError("open " + std::string(resolved), errno);
  struct stat st {};
  if (::fstat(dir.get(), &st) != 0) return SystemError("stat " + std::string(resolved), errno);
  if (st.st_uid != ::geteuid()) {
    return MakeError(ErrorCode::kInvalid, "state dir " + std::string(resolved) + " belongs to uid " +
                                              std::to_string(st.st_uid) + ", not to the daemon's (" +
                                              std::to_string(::geteuid()) + "): refusing it (chown it, or use another)");
  }
  if ((st.st_mode & 022) != 0) {
    return MakeError(ErrorCode::kInvalid, "state dir " + std::string(resolved) + " (mode " + Octal(st.st_mode) +
                                              ") is writable by group or others: refusing it (chmod 0700 it)");
  }
  BH_TRY(CheckAncestors(resolved));
  BH_TRY(Tighten(dir.get(), resolved));

  DIR* entries = ::fdopendir(::dup(dir.get()));
  if (entries == nullptr) return SystemError("opendir " + std::string(resolved), errno);
  Status status;
  while (dirent* e = ::readdir(entries)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    // Files and directories; sockets are made anew at each start, symlinks have no mode.
    struct stat entry_st {};
    if (::fstatat(dir.get(), name.c_str(), &entry_st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (!S_ISREG(entry_st.st_mode) && !S_ISDIR(entry_st.st_mode)) continue;
    UniqueFd entry(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!entry) continue;  // gone meanwhile
    if (Status st_entry = Tighten(entry.get(), name); !st_entry && status) status = st_entry;
  }
  ::closedir(entries);
  return status;
}

}  // namespace bulkhead::core
