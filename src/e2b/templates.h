// E2B's template build API (the SDKs' Template.build, build_in_background, get_build_status,
// exists, tags and delete; docs/e2b-compat.md), on bulkhead's image builder:
//
//   POST /v3/templates                               a build of a name[:tag] is registered (202)
//   GET  /templates/{id}/files/{hash}                whether a COPY's file set is here, else a
//                                                    signed upload URL (201)
//   PUT  /e2b-template-files/{hash}?expires&token    the set's tar (gzip or plain), no API key
//   POST /v2/templates/{id}/builds/{buildID}         the definition: the build starts (204)
//   GET  /templates/{id}/builds/{buildID}/status     status and log entries from logsOffset
//   POST/DELETE /templates/tags, GET /templates/{id}/tags, DELETE /templates/{id}
//
// A template is an alias; its ID is the alias. Each tag of it is a built image named
// "alias" (the default tag) or "alias.tag", labelled with the alias (template_plan.h), so
// templates, tags and the start commands outlast the daemon; a build's status and log are
// kept in memory while it runs and after (the last kKeptBuilds).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "core/sandbox_manager.h"
#include "http/http_exchange.h"
#include "http/request_target.h"

namespace bulkhead::e2b {

struct E2bContext;
// The directory under the daemon's upload dir where template builds are kept.
inline constexpr char kTemplateBuildsDir[] = "e2b-builds";

class TemplateBuilds;  // the builds' status and logs (templates.cc)
// `dir`: where each build is kept as a file too, so that it outlives a restart ("": in memory).
std::shared_ptr<TemplateBuilds> MakeTemplateBuilds(const std::string& dir = "");
// Cancels and forgets every build of the tenant's, logs and all (its purge).
void ForgetTenantBuilds(TemplateBuilds& builds, const std::string& tenant);

// A name as the SDKs send it: [namespace/]alias[:tag], lower-cased (the namespace is the
// team's: one here). Tag "" is the default tag.
struct TemplateName {
  std::string alias;
  std::string tag;
};
std::optional<TemplateName> ParseTemplateName(std::string_view text);
// The image a template's tag is: "alias", or "alias.tag".
std::string TemplateImageName(const TemplateName& name);

// The image name a create's templateID means when it names a built template (with a tag, a
// namespace or in upper case); nullopt for anything else.
std::optional<std::string> TemplateImageFor(core::SandboxManager& manager, const std::string& template_id,
                                            const std::string& tenant);
// Whether `alias` has any built tag or a build in progress (GET /templates/aliases/{alias}).
bool TemplateExists(E2bContext& context, const std::string& alias, const std::string& tenant);

// The routes above but the upload; segments are the path's, decoded. nullopt for a request
// that is none of them.
boost::asio::awaitable<std::optional<std::string_view>> ServeTemplates(E2bContext& context,
                                                                       api::HttpExchange& exchange,
                                                                       const api::RequestTarget& target,
                                                                       const std::vector<std::string>& segments,
                                                                       const std::string& tenant);

// The upload route, before (and without) the API key: its URL is signed.
inline constexpr std::string_view kTemplateUploadPrefix = "/e2b-template-files/";
boost::asio::awaitable<std::string_view> ServeTemplateUpload(E2bContext& context, api::HttpExchange& exchange,
                                                             const api::RequestTarget& target);

}  // namespace bulkhead::e2b
