// GET /v1/sandboxes/{id}/processes/{pid}/attach: a WebSocket to a background process.
// Server -> client: binary frames of its output (stdout and stderr), then, once it exited,
// one text frame {"type":"exit",...} and a normal close. Client -> server: binary frames
// for its stdin; text frames {"type":"resize"|"signal"|"stdin_close",...}. A bad message
// gets a text frame {"type":"error","code","message"} and the session goes on. Closing the
// WebSocket never affects the process.
#pragma once
#include <string>

#include "api/router.h"
#include "core/sandbox_manager.h"
#include "http/http_exchange.h"

namespace bulkhead::api {

// Errors before the upgrade (no upgrade asked, unknown sandbox or process) are ordinary
// HTTP errors; after it the connection belongs to the WebSocket until it closes.
boost::asio::awaitable<void> ServeProcessAttach(HttpExchange& exchange, core::SandboxManager& manager,
                                                const std::string& sandbox_id, const std::string& pid,
                                                const QueryParams& query);

}  // namespace bulkhead::api
