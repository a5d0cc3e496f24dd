// `bulkhead mcp`: a Model Context Protocol server on stdin/stdout whose tools drive the
// daemon's API. Dual-era: it answers the 2026-07-28 revision (no handshake; every request
// carries its protocol version in params._meta; server/discover) and the initialize
// handshake of 2025-11-25, 2025-06-18, 2025-03-26 (with JSON-RPC batches) and 2024-11-05.
// Logs go to stderr only.
#pragma once
#include "client/api_client.h"

namespace bulkhead::mcp {

struct ServerStreams {
  int in_fd = 0;
  int out_fd = 1;
};

// Serves until the input ends (the client closed it) or the output closes; in-flight tool
// calls are then cancelled. Returns the process exit code.
int ServeMcp(const cli::ApiClient& api, ServerStreams streams = {});

}  // namespace bulkhead::mcp
