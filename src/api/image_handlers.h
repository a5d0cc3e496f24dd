// Images and registries: POST /v1/images/pull and /push (a JSON answer once done, or NDJSON progress),
// GET /v1/images/{name} and what a create does with a registry reference (pull on first use).
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

// The image a create names, pulled first where `policy` says ("missing": when not stored,
// "always", "never": 404 if not stored). Fills spec.image with the stored name, spec.image_ref
// with a reference it was named by, and the image config's defaults under what `body` set
// (Env under env, WorkingDir for workdir, User for user).
boost::asio::awaitable<Status> PrepareCreateImage(core::SandboxManager& manager, boost::asio::thread_pool& pool,
                                                  const nlohmann::json& body, core::SandboxSpec& spec);

}  // namespace bulkhead::api
