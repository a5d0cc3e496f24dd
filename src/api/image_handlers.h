// The API's routes for image transfers: POST /v1/images/pull and /push (a JSON answer once done,
// or NDJSON progress). What they share with the E2B front is service/image_transfer.h.
#pragma once
#include <functional>
#include <string>

#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "core/sandbox_manager.h"
#include "http/http_exchange.h"
#include "http/request_target.h"

namespace bulkhead::api {

// Whose image a transfer's is, from the body's "tenant" (nullptr when it names none): the
// caller's own tenant, or for the host's key the tenant it names (ApiHandlers::TenantNamed).
using TenantOfBody = std::function<Result<std::string>(const nlohmann::json* named)>;

// Answers POST /v1/images/push: {"image": NAME_OR_REF, "target": REF, "auth"?}, as ServePull
// does; its result is {"reference", "digest"}.
boost::asio::awaitable<void> ServePush(HttpExchange& exchange, core::SandboxManager& manager,
                                       boost::asio::thread_pool& pool, const TenantOfBody& tenant_of, bool stream);

// Answers POST /v1/images/pull: {"image": REF, "auth": {"username", "password"}?,
// "platform": "os/arch[/variant]"?}. The pull runs on `pool`; with `stream`, its progress
// goes out as NDJSON lines ending with {"status": "done", "image": {...}} or
// {"status": "error", "error": {...}}, else the image comes back once stored (201).
boost::asio::awaitable<void> ServePull(HttpExchange& exchange, core::SandboxManager& manager,
                                       boost::asio::thread_pool& pool, const TenantOfBody& tenant_of, bool stream);

// Answers POST /v1/images/build (service/image_build.h: the query's parameters, the body the
// context as a tar, plain or compressed): the build runs on `pool` with the context spooled
// and unpacked under upload_dir; with `stream` its steps and their output go out as NDJSON
// lines ending as a pull's, else the image comes back once stored (201). A client that goes
// away cancels the build between steps.
boost::asio::awaitable<void> ServeBuild(HttpExchange& exchange, core::SandboxManager& manager,
                                        boost::asio::thread_pool& pool, const std::string& upload_dir,
                                        const QueryParams& query, const std::string& tenant, bool stream);

}  // namespace bulkhead::api
