// Image transfers both fronts start: a pull or push run on a pool thread with its progress
// relayed to the request's coroutine, the JSON of pull and push requests, and what a create does
// with a registry reference (pull on first use). The API's routes are api/image_handlers.h.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "core/sandbox_manager.h"

namespace bulkhead::api {

// A pull or push, run on a pool thread with its progress listener: answers what the API answers.
using Transfer = std::function<Result<nlohmann::json>(const storage::PullListener& listener)>;
// Takes progress lines (NDJSON) on the request's strand; false once nobody listens.
using LineWriter = std::function<boost::asio::awaitable<bool>(const std::string&)>;

// Runs the transfer on `pool`, handing each progress line to `on_line` on this coroutine's
// strand, and answers its result. It goes on to the end if on_line gives up (a client gone).
// (Callers keep temporaries out of the co_await expressions: g++ 12 destroys them wrongly.)
boost::asio::awaitable<Result<nlohmann::json>> RunTransfer(boost::asio::thread_pool& pool, const Transfer& transfer,
                                                          const LineWriter& on_line);

// {"image": REF, "auth": {"username", "password"}?, "platform": "os/arch[/variant]"?}
Result<storage::PullRequest> ParsePullRequest(const nlohmann::json& body, const std::string& default_registry);
// {"image": NAME_OR_REF, "target": REF, "auth"?}
Result<storage::PushRequest> ParsePushRequest(const nlohmann::json& body, const std::string& default_registry);

// The image a create names, pulled first (on `pool`) where body's "pull" says ("missing": when
// not stored, "always", "never": 404 if not stored). Fills spec.image with the stored name,
// spec.image_ref with a reference it was named by, and the image config's defaults under what
// `body` set (Env under env, WorkingDir for workdir, User for user).
boost::asio::awaitable<Status> PrepareCreateImage(core::SandboxManager& manager, boost::asio::thread_pool& pool,
                                                  const nlohmann::json& body, core::SandboxSpec& spec);

}  // namespace bulkhead::api
