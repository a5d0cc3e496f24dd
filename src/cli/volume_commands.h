// The commands for named volumes (volume create, volume ls, volume rm) and the --volume
// flag of run and create.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "cli/session.h"
#include "common/result.h"

namespace bulkhead::cli {

// "NAME:/PATH" or "NAME:/PATH:ro" (also ":rw") -> {"name", "path", "read_only"}. The daemon
// checks the name and path; this only splits them.
Result<nlohmann::json> ParseVolumeFlag(const std::string& text);

// `bulkhead volume create NAME [--size-mb N] [--tenant T] [--json]`: prints the name (or the volume).
int VolumeCreateCommand(Session& session);
// `bulkhead volume ls [--tenant T] [--json]`: NAME [TENANT] SIZE USED CREATED MOUNTED BY.
int VolumeListCommand(Session& session);
// `bulkhead volume rm NAME... [--tenant T]`: prints each name removed; goes on past a failure.
int VolumeRemoveCommand(Session& session);

}  // namespace bulkhead::cli
