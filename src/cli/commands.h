// The client subcommands of `bulkhead` (everything but `serve`), each a short
// conversation with the daemon's HTTP API.
#pragma once
#include "cli/command_line.h"

namespace bulkhead::cli {

// The process's terminal, replaceable in tests.
struct CommandIo {
  int stdin_fd = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;
  // `run` removes its sandbox on SIGINT/SIGTERM/SIGHUP; it blocks those signals in the
  // calling thread and waits for them on a thread of its own.
  bool handle_interrupts = true;
};

// Runs the parsed client command and returns the process exit code: the command's own
// for run/exec, 0 on success, 1 when the daemon reported an error, 2 for usage errors.
// Errors are printed as `bulkhead: <message> (<code>)`.
int RunClientCommand(const CommandLine& line, const CommandIo& io = {});

}  // namespace bulkhead::cli
