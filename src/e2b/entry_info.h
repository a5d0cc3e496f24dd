// envd's EntryInfo (filesystem.proto, in proto3 JSON) made from a file worker's Entry
// (ctl_protocol.h), with the owner and group names of the sandbox's accounts
// (service/accounts.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "service/accounts.h"

namespace bulkhead::e2b {

using api::Account;
using api::Accounts;
using api::ParseGroup;
using api::ParsePasswd;

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
