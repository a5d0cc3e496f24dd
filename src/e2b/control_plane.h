// E2B's control-plane REST API (its spec/openapi.yml and the SDKs' generated clients), served
// from the SandboxManager: create, list, get, kill, timeout, pause, connect (resume), metrics,
// network, fork, snapshots and template aliases. Requests were authenticated by X-API-KEY
// (front.cc).
#pragma once
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "e2b/front.h"
#include "http/http_exchange.h"
#include "http/request_target.h"

namespace bulkhead::e2b {

// Answers one request of `caller` (the E2B key: the host's admin; a tenant's API key: that
// tenant, whose sandboxes and snapshots alone it reaches); answers the route's label.
boost::asio::awaitable<std::string_view> ServeControlPlane(E2bContext& context, api::HttpExchange& exchange,
                                                           const api::RequestTarget& target, const api::Caller& caller);

// NewSandboxV2 (or the v1 NewSandbox) as the body of bulkhead's POST /v1/sandboxes, before
// bulkhead's own validation: templateID "base" is the host image, a snapshot id starts from
// that snapshot, the timeout and autoPause become the lifetime (autoPauseMemory false: stop), envVars the env, the network
// fields the egress policy (E2B's default is open), network.allowPublicTraffic false a private
// preview (its token is E2B's trafficAccessToken). An error for fields of the wrong type and
// for egress rules E2B refuses.
Result<nlohmann::json> BulkheadCreateBody(const nlohmann::json& e2b, bool template_is_snapshot);

// SandboxNetworkConfig / SandboxNetworkUpdateConfig (+ allow_internet_access) as bulkhead's
// network object {"mode", "allow", "deny"}, with E2B's meaning (control_plane.cc).
Result<nlohmann::json> BulkheadNetwork(const nlohmann::json* network, const nlohmann::json* allow_internet_access);

// The `metadata` list filter as the SDKs send it, once URL-decoded: "k=v&k2=v2" with keys and
// values percent-encoded once more.
Result<std::map<std::string, std::string>> ParseMetadataFilter(std::string_view text);

}  // namespace bulkhead::e2b
