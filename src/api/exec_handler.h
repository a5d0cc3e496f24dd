// POST /v1/sandboxes/{id}/exec: runs one command and answers with its result, either as
// one JSON object once it ended or as an NDJSON stream of its events as they happen.
#pragma once
#include <string>
#include <string_view>

#include "core/sandbox_manager.h"
#include "http/http_exchange.h"
#include "service/validate.h"

namespace bulkhead::api {

// True if the Accept header asks for the streaming form.
bool WantsNdjson(std::string_view accept);

// Starts the command and answers `exchange`. Errors before the command started (unknown
// sandbox, bad cwd) get their own status; an error after the stream began becomes a final
// {"type":"error"} line. A client that goes away cancels the command.
boost::asio::awaitable<void> ServeExec(HttpExchange& exchange, core::SandboxManager& manager,
                                       const std::string& sandbox_id, ExecOptions options, bool stream);

}  // namespace bulkhead::api
