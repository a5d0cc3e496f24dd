// The audit trail's commands (core/audit_log.h): audit verify, audit export.
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

// `bulkhead audit verify [--head SEQ:HASH]`: checks the chain of <state dir>/audit.log (read
// directly: it needs the daemon's user, not the daemon) and prints how many records hold and
// the head to keep elsewhere; exit 1 and what broke if a record was edited, removed or moved,
// or, with --head, if the records up to that head were cut off or replaced.
int AuditVerifyCommand(Session& session);
// `bulkhead audit export [--after SEQ]`: every record after SEQ from the daemon, one JSON
// object per line, oldest first (for a SIEM).
int AuditExportCommand(Session& session);

}  // namespace bulkhead::cli
