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
// With a pty, stdin_fd and stdout_fd are both the terminal's master (separate descriptors,
// so each can be polled on its own), stderr_fd is invalid and pty_fd is the master for
// resizing; stdin_fd is then always valid.
struct SpawnedCommand {
  pid_t pid = -1;      // also the process group id: the command runs in its own session
  UniqueFd stdin_fd;   // invalid when the request has "stdin": false
  UniqueFd stdout_fd;
  UniqueFd stderr_fd;
  UniqueFd pty_fd;     // valid only with a pty
};

// The environment a command gets: the request's entries, then PATH, HOME, USER and LOGNAME
// where absent, and TERM=xterm-256color on a terminal. Without one TERM is left alone.
std::vector<std::string> BuildEnvironment(const std::vector<std::string>& requested, const UserIdentity& user,
                                          bool terminal = false);

// Takes the workload cgroup's descriptor (ctl::kWorkloadCgroupFd) if the daemon gave init one
// (not so when init runs as an ordinary process, in a test): from then on every command, and
// every file worker, moves itself into that group first thing after the fork.
void AdoptWorkloadCgroup();

// Errors (returned before anything runs): unknown user or group, missing cwd -> kNotFound;
// cwd not usable by the user -> kInvalid; anything else -> kInternal. An executable that
// cannot be found or run is not an error here: the child prints
// "bulkhead: exec <argv0>: <reason>" on its stderr and exits 127 (126 if it is not runnable).
// With `stdio` (three descriptors, e.g. a sudo client's own) the command gets those as its
// stdin, stdout and stderr instead of pipes, and the result holds no descriptors.
Result<SpawnedCommand> SpawnCommand(const ExecRequest& request, const int* stdio = nullptr);

}  // namespace bulkhead::init
