// envd's EntryInfo (filesystem.proto, in proto3 JSON) made from a file worker's Entry
// (ctl_protocol.h), and what it needs from the sandbox: its users and groups, read from the
// sandbox's own /etc/passwd and /etc/group (the names a program there would see).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::e2b {

struct Account {
  std::string name;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string home;
};

struct Accounts {
  std::vector<Account> users;             // /etc/passwd order; the first of a name or uid wins
  std::map<uint32_t, std::string> groups;  // gid -> name (the first line of a gid wins)

  const Account* FindName(std::string_view name) const;
  const Account* FindUid(uint32_t uid) const;
  // The owner and group names envd reports: the name, or the number when there is none.
  std::string OwnerName(uint32_t uid) const;
  std::string GroupName(uint32_t gid) const;
};

// Lines of /etc/passwd ("name:x:uid:gid:gecos:home:shell") and /etc/group ("name:x:gid:...");
// malformed lines are skipped.
std::vector<Account> ParsePasswd(std::string_view text);
std::map<uint32_t, std::string> ParseGroup(std::string_view text);

// Go's os.FileMode.String() for an Entry's type ("file", "dir", "symlink", "other") and
// mode bits (permissions with setuid, setgid and sticky): "-rw-r--r--", "drwxr-xr-x",
// "Lrwxrwxrwx", "dtrwxrwxrwx", "urwxr-xr-x", "?---------".
std::string GoFileModeString(std::string_view type, uint32_t mode);

// The EntryInfo for a worker Entry: name, type (FILE_TYPE_*), path, size (an int64: a
// string), mode (permission bits), permissions, owner, group, modifiedTime and, for a
// symlink, symlinkTarget. As envd (its filesystem.GetEntryInfo) a symlink is described by
// what it leads to: that one's type and mode, and symlinkTarget the absolute path it resolves
// to (the worker's "resolve_links"); one that leads nowhere has no type and itself as its
// target. The rest (size, permissions, owner, times) are the link's own. `metadata` is the
// Entry's "xattrs" (kMetadataXattrPrefix), when it has any. An error for an Entry that lacks
// its fields (a broken worker).
// Where envd keeps a file's metadata (X-Metadata-* on upload): user.e2b.<key> xattrs.
constexpr std::string_view kMetadataXattrPrefix = "user.e2b.";

Result<nlohmann::json> EntryInfoJson(const nlohmann::json& entry, const Accounts& accounts);

// ListDir's order, that of envd's filepath.WalkDir: a walk of the tree in which each
// directory's names come in byte order and each directory is followed by its contents. That
// is the order of the paths compared component by component.
void SortEntryInfos(std::vector<nlohmann::json>& entries);

}  // namespace bulkhead::e2b
