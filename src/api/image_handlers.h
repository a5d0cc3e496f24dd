// The API's routes for image transfers: POST /v1/images/pull and /push (a JSON answer once done,
// or NDJSON progress). What they share with the E2B front is service/image_transfer.h.
#pragma once
#include <string>

#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "core/sandbox_manager.h"
#include "http/http_exchange.h"

namespace bulkhead::api {

// Answers POST /v1/images/push: {"image": NAME_OR_REF, "target": REF, "auth"?}, as ServePull
// does; its result is {"reference", "digest"}.
boost::asio::awaitable<void> ServePush(HttpExchange& exchange, core::SandboxManager& manager,
                                       boost::asio::thread_pool& pool, bool stream);

// Answers POST /v1/images/pull: {"image": REF, "auth": {"username", "password"}?,
// "platform": "os/arch[/variant]"?}. The pull runs on `pool`; with `stream`, its progress
// goes out as NDJSON lines ending with {"status": "done", "image": {...}} or
// {"status": "error", "error": {...}}, else the image comes back once stored (201).
boost::asio::awaitable<void> ServePull(HttpExchange& exchange, core::SandboxManager& manager,
                                       boost::asio::thread_pool& pool, bool stream);

}  // namespace bulkhead::api
