// The file routes (/v1/sandboxes/{id}/files...): each runs one file operation in the sandbox
// (core/file_operation.h) and streams its content through with bounded memory: uploads go
// to the worker piece by piece as they are read, downloads are read from the worker only as
// fast as the client takes them.
#pragma once
#include <string>

#include "api/router.h"
#include "core/sandbox_manager.h"
#include "http/http_exchange.h"

namespace bulkhead::api {

// Answers one file route. Errors before any response (bad parameters, unknown sandbox or
// path, a worker that failed) get their status; a download that fails half-way is cut short
// (the connection closes before the announced length or the last chunk).
boost::asio::awaitable<void> ServeFiles(HttpExchange& exchange, core::SandboxManager& manager, RouteId route,
                                        const std::string& sandbox_id, const QueryParams& query);

}  // namespace bulkhead::api
