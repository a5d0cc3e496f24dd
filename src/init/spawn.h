// Starting one command: user lookup, environment, pipes, fork and the steps in the child
// up to exec.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "init/exec_request.h"
#include "init/user_db.h"

namespace bulkhead::init {

// Init's ends of a started command's pipes, all nonblocking and close-on-exec.
struct SpawnedCommand {
  pid_t pid = -1;      // also the process group id: the command runs in its own session
  UniqueFd stdin_fd;   // invalid when the request has "stdin": false
  UniqueFd stdout_fd;
  UniqueFd stderr_fd;
};

// The environment a command gets: the request's entries, then PATH, HOME, USER and LOGNAME
// where absent. TERM is left alone: there is no terminal.
std::vector<std::string> BuildEnvironment(const std::vector<std::string>& requested, const UserIdentity& user);

// Errors (returned before anything runs): unknown user or group, missing cwd -> kNotFound;
// cwd not usable by the user -> kInvalid; anything else -> kInternal. An executable that
// cannot be found or run is not an error here: the child prints
// "bulkhead: exec <argv0>: <reason>" on its stderr and exits 127 (126 if it is not runnable).
Result<SpawnedCommand> SpawnCommand(const ExecRequest& request);

}  // namespace bulkhead::init
