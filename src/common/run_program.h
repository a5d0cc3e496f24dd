// Runs a host tool (mkfs, runsc) to completion: posix_spawn, never a shell.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "common/result.h"

namespace bulkhead {

// Runs argv[0] (an absolute path) with argv, stdin from /dev/null and stdout+stderr
// captured. Fails unless it exits 0; the error message carries the tail of its output.
Status RunProgram(const std::vector<std::string>& argv);
// The same, answering what it printed (its last 64 KiB at most). With a timeout, a tool still
// running then is killed and the call fails (kUnavailable): for tools that talk to something
// that may hang, as runsc to a wedged sandbox.
Result<std::string> RunProgramOutput(const std::vector<std::string>& argv,
                                     std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

// The first of candidates that exists and is executable, or "".
std::string FindProgram(const std::vector<std::string>& candidates);

}  // namespace bulkhead
