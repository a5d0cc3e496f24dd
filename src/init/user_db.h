// Who a command runs as. Init is a static binary, where NSS (getpwnam and friends) does not
// work, so it reads the sandbox's /etc/passwd and /etc/group itself.
#pragma once
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bulkhead::init {

struct UserIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, the primary gid included
  std::string name;           // empty for a numeric uid that /etc/passwd does not know
  std::string home = "/";
  std::string shell = "/bin/sh";  // login shell (sudo -i, -s)
};

// `spec` is "name", "uid", "name:group" or "uid:gid" (group by name or number).
// A name that the files do not know is kNotFound. A numeric uid that /etc/passwd does not
// know runs with gid = uid (never the root group by accident) and HOME=/.
Result<UserIdentity> ResolveUser(std::string_view spec, const std::string& passwd_path = "/etc/passwd",
                                 const std::string& group_path = "/etc/group");

}  // namespace bulkhead::init
