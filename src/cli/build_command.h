// `bulkhead build`: a Dockerfile built by the daemon (service/image_build.h).
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

// `bulkhead build [-t NAME] [-f DOCKERFILE] [--build-arg K=V].. [--target S] [--runtime R]
// [--no-cache] [--pull P] [--allow ENTRY].. [--network M] CONTEXT`: the context goes as a tar
// stream, less what its .dockerignore leaves out; each step is shown as it starts (cached or
// run) with its output on stderr; the image's name (or id, untagged) is printed on stdout.
// --json prints the API's NDJSON events instead.
int BuildCommand(Session& session);
// `bulkhead image prune-cache`: the build cache's entries deleted; prints how many.
int PruneBuildCacheCommand(Session& session);

}  // namespace bulkhead::cli
