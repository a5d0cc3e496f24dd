// The commands for a sandbox's background processes: exec -d, ps, logs, kill.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "cli/session.h"

namespace bulkhead::cli {

// `exec -d`: POSTs `request` (an exec-style body) to .../processes and prints the pid.
int DetachedExecCommand(Session& session, nlohmann::json request);
int ProcessListCommand(Session& session);
int LogsCommand(Session& session);
int KillCommand(Session& session);

}  // namespace bulkhead::cli
