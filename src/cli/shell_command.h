// `bulkhead shell ID`: an interactive terminal in a sandbox.
#pragma once
#include <string>
#include <vector>

#include "cli/session.h"

namespace bulkhead::cli {

int ShellCommand(Session& session);

// What runs when --cmd is not given: bash (as a login shell) where the image has it,
// else sh.
std::vector<std::string> DefaultShellArgv();

}  // namespace bulkhead::cli
