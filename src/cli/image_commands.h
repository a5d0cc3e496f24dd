// The commands for images: image pull (with a progress bar on a terminal), import, ls,
// inspect and rm.
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

// `bulkhead image pull REF [--platform OS/ARCH] [--json]`: the daemon fetches REF from its
// registry; prints a progress bar on a terminal, the layers as they finish otherwise, then
// the image's name and digest (or, with --json, the API's NDJSON events as they come).
int ImagePullCommand(Session& session);
// `bulkhead image push NAME|REF TARGET [--json]`: the daemon writes the image to TARGET's
// registry; prints each blob as it goes (or the NDJSON events), then the target and digest.
int ImagePushCommand(Session& session);
// `bulkhead image import NAME PATH`: a directory (sent as a tar stream) or a tarball.
int ImageImportCommand(Session& session);
// `bulkhead image ls [--json]`: NAME SOURCE SIZE CREATED REFERENCES.
int ImageListCommand(Session& session);
// `bulkhead image inspect NAME|REF`: the image's JSON (digest, references, config, ports).
int ImageInspectCommand(Session& session);
// `bulkhead image rm NAME|REF`: a reference comes off its image, the image goes with its last.
int ImageRemoveCommand(Session& session);

}  // namespace bulkhead::cli
