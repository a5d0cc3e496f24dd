// The commands for snapshots and forks: snapshot create, ls, rm, export and import, fork.
// (run and create start a sandbox from one with --from-snapshot.)
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

// `bulkhead snapshot create ID [--name N] [--memory] [--json]`: prints the snapshot's id (or
// the snapshot). --memory keeps the sandbox's memory and processes too (gvisor).
int SnapshotCreateCommand(Session& session);
// `bulkhead snapshot ls [--json]`: ID NAME SANDBOX RUNTIME MEMORY SIZE CREATED.
int SnapshotListCommand(Session& session);
// `bulkhead snapshot rm SNAPSHOT...`: prints each id removed; goes on past a failure.
int SnapshotRemoveCommand(Session& session);
// `bulkhead snapshot export SNAPSHOT FILE`: the snapshot's files as a .tar.zst into FILE (made
// 0600, not through a symlink; removed again if the export fails), or stdout for "-".
int SnapshotExportCommand(Session& session);
// `bulkhead snapshot import FILE`: a new snapshot from such an archive ("-": stdin); prints its id.
int SnapshotImportCommand(Session& session);
// `bulkhead fork ID [-n N] [--memory] [--json]`: prints the new sandboxes' ids, one a line.
int ForkCommand(Session& session);

}  // namespace bulkhead::cli
