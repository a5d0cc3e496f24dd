#include "init/user_db.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>

namespace bulkhead::init {
namespace {

struct PasswdEntry {
  std::string name;
  uid_t uid;
  gid_t gid;
  std::string home;
  std::string shell;
};

struct GroupEntry {
  std::string name;
  gid_t gid;
  std::vector<std::string> members;
};

std::vector<std::string_view> SplitFields(std::string_view line, char sep) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t end = line.find(sep, start);
    fields.push_back(line.substr(start, end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return fields;
}

// A decimal id; (uid_t)-1 is "no change" to setuid() and never a real id.
std::optional<uint32_t> ParseId(std::string_view text) {
  uint32_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == uint32_t(-1)) {
    return std::nullopt;
  }
  return value;
}

bool IsNumeric(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Lines that are comments, NIS markers ("+"/"-") or malformed are skipped, as glibc does.
std::vector<PasswdEntry> ReadPasswd(const std::string& path) {
  std::vector<PasswdEntry> entries;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#' || line[0] == '+' || line[0] == '-') continue;
    auto f = SplitFields(line, ':');  // name:password:uid:gid:gecos:home:shell
    if (f.size() < 7 || f[0].empty()) continue;
    auto uid = ParseId(f[2]);
    auto gid = ParseId(f[3]);
    if (!uid || !gid) continue;
    entries.push_back(PasswdEntry{std::string(f[0]), *uid, *gid, std::string(f[5]), std::string(f[6])});
  }
  return entries;
}

std::vector<GroupEntry> ReadGroups(const std::string& path) {
  std::vector<GroupEntry> entries;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#' || line[0] == '+' || line[0] == '-') continue;
    auto f = SplitFields(line, ':');  // name:password:gid:member,member
    if (f.size() < 4 || f[0].empty()) continue;
    auto gid = ParseId(f[2]);
    if (!gid) continue;
    GroupEntry entry{std::string(f[0]), *gid, {}};
    if (!f[3].empty()) {
      for (auto member : SplitFields(f[3], ',')) entry.members.emplace_back(member);
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

UserIdentity FromPasswd(const PasswdEntry& entry) {
  UserIdentity identity;
  identity.uid = entry.uid;
  identity.gid = entry.gid;
  identity.name = entry.name;
  identity.home = entry.home.empty() ? "/" : entry.home;
  if (!entry.shell.empty()) identity.shell = entry.shell;
  return identity;
}

// The primary gid first, then every group that lists the user as a member.
void FillGroups(UserIdentity& identity, const std::vector<GroupEntry>& groups) {
  identity.groups = {identity.gid};
  if (identity.name.empty()) return;
  for (const auto& group : groups) {
    bool member = std::find(group.members.begin(), group.members.end(), identity.name) != group.members.end();
    bool known = std::find(identity.groups.begin(), identity.groups.end(), group.gid) != identity.groups.end();
    if (member && !known) identity.groups.push_back(group.gid);
  }
}

}  // namespace

Result<UserIdentity> ResolveUser(std::string_view spec, const std::string& passwd_path,
                                 const std::string& group_path) {
  size_t colon = spec.find(':');
  std::string_view user_part = spec.substr(0, colon);
  std::optional<std::string_view> group_part;
  if (colon != std::string_view::npos) group_part = spec.substr(colon + 1);
  if (user_part.empty() || (group_part && group_part->empty())) {
    return MakeError(ErrorCode::kInvalid, "user \"" + std::string(spec) + "\" is not valid");
  }

  std::vector<PasswdEntry> passwd = ReadPasswd(passwd_path);
  UserIdentity identity;
  if (IsNumeric(user_part)) {
    auto uid = ParseId(user_part);
    if (!uid) return MakeError(ErrorCode::kInvalid, "uid " + std::string(user_part) + " is not valid");
    auto it = std::find_if(passwd.begin(), passwd.end(), [&](const PasswdEntry& e) { return e.uid == *uid; });
    if (it != passwd.end()) {
      identity = FromPasswd(*it);
    } else {
      identity.uid = *uid;
      identity.gid = *uid;
    }
  } else {
    auto it = std::find_if(passwd.begin(), passwd.end(), [&](const PasswdEntry& e) { return e.name == user_part; });
    if (it == passwd.end() && user_part == "root") {
      // An image without /etc/passwd (a "scratch" image) still has a root: uid 0.
      identity.name = "root";
      identity.home = "/root";
    } else if (it == passwd.end()) {
      return MakeError(ErrorCode::kNotFound, "user " + std::string(user_part) + " not found in /etc/passwd");
    } else {
      identity = FromPasswd(*it);
    }
  }

  std::vector<GroupEntry> groups = ReadGroups(group_path);
  if (group_part) {
    if (IsNumeric(*group_part)) {
      auto gid = ParseId(*group_part);
      if (!gid) return MakeError(ErrorCode::kInvalid, "gid " + std::string(*group_part) + " is not valid");
      identity.gid = *gid;
    } else {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const GroupEntry& g) { return g.name == *group_part; });
      if (it == groups.end()) {
        return MakeError(ErrorCode::kNotFound, "group " + std::string(*group_part) + " not found in /etc/group");
      }
      identity.gid = it->gid;
    }
  }
  FillGroups(identity, groups);
  return identity;
}

}  // namespace bulkhead::init
