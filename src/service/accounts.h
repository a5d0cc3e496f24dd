// A sandbox's users and groups, read from its own /etc/passwd and /etc/group (the names a
// program there would see): the E2B front's owners and users, a build's COPY --chown.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace bulkhead::api {

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

}  // namespace bulkhead::api
