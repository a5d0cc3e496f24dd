#include "service/accounts.h"

#include <charconv>

namespace bulkhead::api {

namespace {

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    const size_t colon = line.find(':', start);
    if (colon == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, colon - start));
    start = colon + 1;
  }
}

bool ParseId(std::string_view text, uint32_t& out) {
  if (text.empty() || text.size() > 10) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

template <typename Function>
void ForEachLine(std::string_view text, Function function) {
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() && line[0] != '#') function(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

}  // namespace

const Account* Accounts::FindName(std::string_view name) const {
  for (const Account& account : users) {
    if (account.name == name) return &account;
  }
  return nullptr;
}

const Account* Accounts::FindUid(uint32_t uid) const {
  for (const Account& account : users) {
    if (account.uid == uid) return &account;
  }
  return nullptr;
}

std::string Accounts::OwnerName(uint32_t uid) const {
  const Account* account = FindUid(uid);
  return account ? account->name : std::to_string(uid);
}

std::string Accounts::GroupName(uint32_t gid) const {
  const auto found = groups.find(gid);
  return found != groups.end() ? found->second : std::to_string(gid);
}

std::vector<Account> ParsePasswd(std::string_view text) {
  std::vector<Account> users;
  ForEachLine(text, [&](std::string_view line) {
    const std::vector<std::string_view> fields = Fields(line);
    if (fields.size() < 6 || fields[0].empty()) return;
    Account account;
    if (!ParseId(fields[2], account.uid) || !ParseId(fields[3], account.gid)) return;
    account.name = std::string(fields[0]);
    account.home = fields[5].empty() ? std::string("/") : std::string(fields[5]);
    users.push_back(std::move(account));
  });
  return users;
}

std::map<uint32_t, std::string> ParseGroup(std::string_view text) {
  std::map<uint32_t, std::string> groups;
  ForEachLine(text, [&](std::string_view line) {
    const std::vector<std::string_view> fields = Fields(line);
    uint32_t gid = 0;
    if (fields.size() < 3 || fields[0].empty() || !ParseId(fields[2], gid)) return;
    groups.emplace(gid, std::string(fields[0]));  // the first line of a gid wins
  });
  return groups;
}

}  // namespace bulkhead::api
