// The commands that work on a sandbox's files: cp, ls ID [PATH], watch.
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

int CopyCommand(Session& session);
int FileListCommand(Session& session);
int WatchCommand(Session& session);

}  // namespace bulkhead::cli
