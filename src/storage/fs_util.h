// Small filesystem helpers shared by the storage module. Everything that walks a tree
// works on directory fds and never follows symlinks, so a tree that a sandbox wrote into
// cannot point the daemon at a host file.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::storage {

// Removes path and everything under it without following symlinks. Missing = success.
Status RemoveTree(const std::string& path);

// Sum of the allocated bytes (st_blocks) of everything under path, without following symlinks.
Result<int64_t> TreeAllocatedBytes(const std::string& path);

// mkdir + chmod (so the umask does not matter) + chown; an existing directory is adjusted.
Status MakeDir(const std::string& path, mode_t mode, uid_t uid = 0, gid_t gid = 0);
// The same relative to a directory fd; refuses to follow a symlink at name.
Status MakeDirAt(int dir_fd, const std::string& name, mode_t mode, uid_t uid = 0, gid_t gid = 0);

// Writes a whole file (created or truncated) with mode and owner (root by default).
Status WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644, uid_t uid = 0,
                 gid_t gid = 0);
Result<std::string> ReadFile(const std::string& path);

UniqueFd OpenDirNoFollow(const std::string& path);

// The names in the directory dir_fd, without "." and "..", in readdir order.
Result<std::vector<std::string>> ListNames(int dir_fd);

// A mount listed in /proc/self/mountinfo.
struct MountEntry {
  std::string mount_point;
  std::string fs_type;
  std::string source;         // e.g. /dev/loop3
  std::string super_options;  // e.g. rw,attr2,inode64,prjquota
};
// The mount whose mount point is exactly path (resolved with realpath), if any.
std::optional<MountEntry> FindMount(const std::string& path);

// A relative archive or tree name that stays below its root: not absolute, no ".." component.
bool IsContainedName(const std::string& name);

// Runs work in a thread of its own (unshare CLONE_FS) whose root and cwd are root_fd, with
// umask 022 and a UTF-8 locale (so pax headers' UTF-8 names convert without loading a charset
// module the chroot could not find). Even a bug in what work calls cannot write outside root_fd,
// and the daemon's other threads keep their root and cwd.
Status RunChrooted(int root_fd, const std::function<Status()>& work);

// Image and sandbox ids that are safe as one path component: [A-Za-z0-9][A-Za-z0-9._-]{0,127}.
bool IsSafeName(const std::string& name);

// Current time as RFC 3339 UTC, e.g. 2025-01-02T03:04:05Z.
std::string NowRfc3339();

}  // namespace bulkhead::storage
