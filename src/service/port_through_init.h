// The port proxy's way to an application in a sandbox with a kernel of its own (the microvm
// tier: SandboxManager::PortsThroughInit): the sandbox's init runs a "connect" worker that
// connects to the port on the sandbox's loopback, and the daemon carries the bytes between
// the worker's stdio frames and one end of a socket pair. The caller gets the other end, as it
// gets a socket in the sandbox's network namespace from the other tiers.
#pragma once
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <string>

#include "common/result.h"
#include "core/sandbox_manager.h"
#include "net/relay.h"

namespace bulkhead::api {

// Errors: the sandbox's (404, 409), a worker that found nothing listening ("not_found"
// detail code: the caller answers its own "not listening"), or the relay failing to start.
boost::asio::awaitable<Result<net::StreamSocket>> ConnectThroughInit(core::SandboxManager& manager,
                                                                     const std::string& id, uint16_t port);

}  // namespace bulkhead::api
