// Files on this machine streamed to and from the daemon: what cp, image import and snapshot
// export and import share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "client/http_client.h"
#include "common/result.h"

namespace bulkhead::cli {

// Sends `fd` through `sink`: `size` bytes exactly when known (the body then matches its
// Content-Length), else until EOF. `what` names it in errors.
Status SendFile(int fd, std::optional<uint64_t> size, const std::string& what, const BodyChunkSink& sink);

// Writes a download's body to `fd` piece by piece as it arrives.
Status Drain(StreamedResponse& response, int fd);

}  // namespace bulkhead::cli
