// Preview access (API.md "Ports"): who may reach a sandbox's port by host name,
// {port}-{id}.{preview_domain}. A public sandbox's ports are open to whoever knows its id. A
// private one's (create with "preview": {"public": false}) need its preview token, carried by
//   - the Bulkhead-Preview-Token header, or E2B's e2b-traffic-access-token;
//   - the bulkhead_preview_token cookie, which a browser gets by opening the URL once with
//     ?bulkhead_preview_token=<token>: that GET is answered by a redirect to the same URL
//     without the token, setting the cookie for that host alone;
//   - or the bulkhead API key (Authorization: Bearer), as on the keyed route.
// Anything else is 403. Tokens are compared in constant time, and none of these credentials
// reaches the app (AppRequestHead drops them).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>

#include "core/sandbox_manager.h"
#include "service/access_keys.h"
#include "http/http_exchange.h"

namespace bulkhead::api {

inline constexpr std::string_view kPreviewTokenHeader = "Bulkhead-Preview-Token";
inline constexpr std::string_view kE2bTrafficTokenHeader = "e2b-traffic-access-token";
// The cookie's name, and the query parameter's that sets it.
inline constexpr std::string_view kPreviewTokenName = "bulkhead_preview_token";

// A Host of the form "{port}-{id}.{preview_domain}" (case-insensitive): a request for a
// sandbox's port by host name. The parts are as written (lower case), not yet validated.
struct PreviewHost {
  std::string port;
  std::string sandbox_id;
};
std::optional<PreviewHost> MatchPreviewHost(std::string_view host, std::string_view preview_domain);

enum class PreviewVerdict {
  kAllowed,
  kSetCookie,  // a GET with the right token in its query: redirect without it, setting the cookie
  kMissing,    // 403: no credential at all
  kInvalid,    // 403: a credential, but not this sandbox's token
};

// Whether `header` (every instance of it) carries `token`: kAllowed, kMissing (absent or empty)
// or kInvalid.
PreviewVerdict CheckTokenHeader(const RequestHeader& request, std::string_view header, std::string_view token);

// The verdict for a request by preview host name to a sandbox with `preview`. `has_api_key`:
// it carries the bulkhead key. The cookie counts only for requests the browser says are the
// page's own or a navigation (Sec-Fetch-Site, Sec-Fetch-Mode): under one preview domain all
// sandboxes are the same site, so SameSite alone would let another sandbox's page send
// requests with it. Pure.
PreviewVerdict DecidePreviewAccess(const RequestHeader& request, const core::PreviewAccess& preview,
                                   bool has_api_key);

// `target` without the kPreviewTokenName query parameter (for the redirect, the app and the
// log); the same string when it has none.
std::string WithoutPreviewTokenParam(std::string_view target);

// A Cookie header's value without the kPreviewTokenName cookie; "" when nothing else is left.
std::string CookiesWithoutPreviewToken(std::string_view cookies);

// Serves a request by preview host name: 404 for an unknown sandbox, the access check, then
// the port proxy. `caller`: who the request's Authorization names, if anyone; the host's key
// and the sandbox's own tenant's keys open a private preview as its token does, another
// tenant's do not.
boost::asio::awaitable<void> ServePreviewHost(HttpExchange& exchange, core::SandboxManager& manager,
                                              const PreviewHost& host, const std::optional<Caller>& caller);

}  // namespace bulkhead::api
