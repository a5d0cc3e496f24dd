// `bulkhead serve`: the daemon's main loop.
#pragma once
#include "core/config.h"

namespace bulkhead::api {

// Prepares the state directory and API key, opens the SandboxManager, serves the HTTP API
// on config.listen (if set) and on <state>/bulkhead.sock until SIGINT/SIGTERM, then shuts
// the manager down. Answers the process exit code: 0 after a clean shutdown, 1 if the
// daemon could not start.
int RunDaemon(const core::DaemonConfig& config);

}  // namespace bulkhead::api
