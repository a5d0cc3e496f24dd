// The file routes (/v1/sandboxes/{id}/files...): each runs one file operation in the sandbox
// (core/file_operation.h) and streams its content through with bounded memory: uploads go
// to the worker piece by piece as they are read, downloads are read from the worker only as
// fast as the client takes them.
#pragma once
#include <string>

#include "api/http_exchange.h"
#include "api/router.h"
#include "core/sandbox_manager.h"

namespace bulkhead::api {

// Answers one file route. Errors before any response (bad parameters, unknown sandbox or
// path, a worker that failed) get their status; a download that fails half-way is cut short
// (the connection closes before the announced length or the last chunk).
boost::asio::awaitable<void> ServeFiles(HttpExchange& exchange, core::SandboxManager& manager, RouteId route,
                                        const std::string& sandbox_id, const QueryParams& query);

// mkdir -p `path` inside the sandbox as `user` (the workdir a new sandbox asked for).
boost::asio::awaitable<Status> MakeDirectoryInside(core::SandboxManager& manager, const std::string& sandbox_id,
                                                   const std::string& path, const std::string& user);

}  // namespace bulkhead::api
