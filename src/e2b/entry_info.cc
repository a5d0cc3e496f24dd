#include "e2b/entry_info.h"

#include <algorithm>
#include <charconv>
#include <optional>

namespace bulkhead::e2b {

using nlohmann::json;

std::string GoFileModeString(std::string_view type, uint32_t mode) {
  // Go prints its type and special bits as letters from "dalTLDpSugct?" in that order, then
  // rwx for the permission bits, with '-' standing in when no letter applies.
  std::string out;
  if (type == "dir") out += 'd';
  if (type == "symlink") out += 'L';
  if (mode & 04000) out += 'u';
  if (mode & 02000) out += 'g';
  if (mode & 01000) out += 't';
  if (type == "other") out += '?';
  if (out.empty()) out += '-';
  static constexpr char kRwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (mode & (1u << (8 - i))) ? kRwx[i] : '-';
  return out;
}

Result<json> EntryInfoJson(const json& entry, const Accounts& accounts) {
  const auto broken = [](std::string_view what) {
    return MakeError(ErrorCode::kInternal, "the sandbox's file worker answered an entry without " + std::string(what));
  };
  if (!entry.is_object()) return broken("its fields");
  const auto string_field = [&](const char* key) -> const std::string* {
    const auto found = entry.find(key);
    return found != entry.end() && found->is_string() ? &found->get_ref<const std::string&>() : nullptr;
  };
  const auto number_field = [&](const char* key) -> std::optional<uint64_t> {
    const auto found = entry.find(key);
    if (found == entry.end() || !found->is_number_integer()) return std::nullopt;
    if (found->is_number_unsigned()) return found->get<uint64_t>();
    const int64_t value = found->get<int64_t>();
    if (value < 0) return std::nullopt;
    return static_cast<uint64_t>(value);
  };
  const std::string* path = string_field("path");
  const std::string* name = string_field("name");
  const std::string* type = string_field("type");
  const std::optional<uint64_t> size = number_field("size");
  const std::optional<uint64_t> mode = number_field("mode");
  const std::optional<uint64_t> uid = number_field("uid");
  const std::optional<uint64_t> gid = number_field("gid");
  if (!path || !name || !type) return broken("path, name or type");
  if (!size || !mode || !uid || !gid) return broken("size, mode, uid or gid");

  const bool symlink = *type == "symlink";
  // A symlink: what it leads to, if anything.
  const std::string* target_type = symlink ? string_field("target_type") : type;
  const std::optional<uint64_t> target_mode = symlink ? number_field("target_mode") : mode;
  std::string file_type = "FILE_TYPE_UNSPECIFIED";
  if (target_type && *target_type == "file") file_type = "FILE_TYPE_FILE";
  if (target_type && *target_type == "dir") file_type = "FILE_TYPE_DIRECTORY";
  const auto bits = static_cast<uint32_t>(*mode & 07777);
  json info = {
      {"name", *name},
      {"type", file_type},
      {"path", *path},
      {"size", std::to_string(*size)},                                      // int64: a string in proto3 JSON
      {"mode", static_cast<uint32_t>(target_mode.value_or(0) & 0777)},      // Go's FileMode.Perm()
      {"permissions", GoFileModeString(*type, bits)},
      {"owner", accounts.OwnerName(static_cast<uint32_t>(*uid))},
      {"group", accounts.GroupName(static_cast<uint32_t>(*gid))},
  };
  if (const std::string* mtime = string_field("mtime")) info["modifiedTime"] = *mtime;
  if (symlink) {
    const std::string* resolved = string_field("resolved");
    info["symlinkTarget"] = resolved ? *resolved : *path;
  }
  // The user.e2b.* extended attributes (the worker's "xattrs", the prefix stripped).
  if (auto xattrs = entry.find("xattrs"); xattrs != entry.end() && xattrs->is_object() && !xattrs->empty()) {
    json metadata = json::object();
    for (const auto& [key, value] : xattrs->items()) {
      if (value.is_string()) metadata[key] = value;
    }
    if (!metadata.empty()) info["metadata"] = std::move(metadata);
  }
  return info;
}

void SortEntryInfos(std::vector<json>& entries) {
  // With '/' as the least byte (paths hold no NUL), a plain byte comparison of the paths
  // compares them component by component: "/d/a/y" < "/d/a-b".
  std::vector<std::pair<std::string, json>> keyed;
  keyed.reserve(entries.size());
  for (json& entry : entries) {
    std::string key = entry.value("path", "");
    std::replace(key.begin(), key.end(), '/', '\0');
    keyed.emplace_back(std::move(key), std::move(entry));
  }
  // std::string compares its chars as unsigned char, as Go compares strings.
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  entries.clear();
  for (auto& [key, entry] : keyed) entries.push_back(std::move(entry));
}

}  // namespace bulkhead::e2b
