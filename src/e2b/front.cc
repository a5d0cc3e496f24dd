#include "e2b/front.h"

#include <ctime>

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/field.hpp>
#include <fmt/format.h>

#include "e2b/control_plane.h"
#include "e2b/envd.h"
#include "e2b/envd_auth.h"
#include "http/blocking.h"
#include "http/json_text.h"
#include "net/allow_rules.h"
#include "service/api_key.h"
#include "service/port_proxy.h"
#include "service/preview_access.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

asio::awaitable<void> SendE2bError(api::HttpExchange& exchange, int status, std::string_view message) {
  const json body = {{"code", status}, {"message", message}};
  co_await exchange.SendText(static_cast<http::status>(status), "application/json", api::DumpJson(body));
}

asio::awaitable<void> SendE2bError(api::HttpExchange& exchange, const Error& error) {
  co_await SendE2bError(exchange, HttpStatus(error.code), error.message);
}

namespace {

constexpr std::string_view kInvalidSignature = "invalid signature";

std::string_view Header(const api::RequestHeader& request, std::string_view name) {
  const auto found = request.find(api::ToBeast(name));
  return found == request.end() ? std::string_view() : api::FromBeast(found->value());
}

const std::string* QueryValue(const api::QueryParams& query, std::string_view name) {
  for (const auto& [key, value] : query) {
    if (key == name) return &value;
  }
  return nullptr;
}

// What a /files request's signature (the SDKs' uploadUrl/downloadUrl) says, under a sandbox's
// token: the signature of this path, operation and user, and whether its time has passed.
enum class SignatureCheck { kNone, kInvalid, kExpired, kValid };

SignatureCheck CheckFileSignature(const api::RequestHeader& request, const api::QueryParams& query,
                                 std::string_view token) {
  const std::string* signature = QueryValue(query, "signature");
  if (!signature) return SignatureCheck::kNone;
  const std::string* path = QueryValue(query, "path");
  const std::string* user = QueryValue(query, "username");
  int64_t expiration = 0;
  if (const std::string* text = QueryValue(query, "signature_expiration")) {
    try {
      size_t used = 0;
      expiration = std::stoll(*text, &used);
      if (used != text->size()) return SignatureCheck::kInvalid;
    } catch (const std::exception&) {
      return SignatureCheck::kInvalid;
    }
  }
  const std::string_view operation = request.method() == http::verb::get ? "read" : "write";
  const std::string expected = FileSignature(path ? *path : "", operation, user ? *user : "", token, expiration);
  if (!api::ConstantTimeEquals(*signature, expected)) return SignatureCheck::kInvalid;
  if (expiration != 0 && expiration < static_cast<int64_t>(std::time(nullptr))) return SignatureCheck::kExpired;
  return SignatureCheck::kValid;
}

// The sandbox whose access token signed this /files request, expired or not; "" if none.
std::string SandboxOfSignature(E2bContext& context, const api::RequestHeader& request, const api::QueryParams& query) {
  for (const core::SandboxInfo& sandbox : context.manager.List(core::ListFilter{})) {
    if (CheckFileSignature(request, query, EnvdAccessToken(context.key, sandbox.id)) != SignatureCheck::kInvalid) {
      return sandbox.id;
    }
  }
  return "";
}

// Why envd refuses a request without the right X-Access-Token; nullopt if it may go on.
// /files may instead be signed (envd's validateSigning, with its messages).
std::optional<std::string_view> AccessRefusal(const api::RequestHeader& request, const api::RequestTarget& target,
                                              std::string_view token) {
  const std::string_view presented = Header(request, "X-Access-Token");
  if (api::ConstantTimeEquals(presented, token)) return std::nullopt;
  if (target.path != "/files") {
    return "unauthorized access, please provide a valid access token or method signing if supported";
  }
  if (!presented.empty()) return "access token present in header but does not match";
  switch (CheckFileSignature(request, target.query, token)) {
    case SignatureCheck::kValid: return std::nullopt;
    case SignatureCheck::kNone: return "missing signature query parameter";
    case SignatureCheck::kInvalid: return kInvalidSignature;
    case SignatureCheck::kExpired: return "signature is already expired";
  }
  return kInvalidSignature;
}

// An answer of E2B's proxy (envd's and the sandbox's ports' traffic): {"sandboxId", "message", "code"},
// and the `extra` fields.
asio::awaitable<void> SendProxyError(api::HttpExchange& exchange, http::status status, const std::string& sandbox_id,
                                     std::string_view message, json extra = json::object()) {
  json body = {{"sandboxId", sandbox_id}, {"message", message}, {"code", static_cast<int>(status)}};
  body.update(extra);
  co_await exchange.SendText(status, "application/json", api::DumpJson(body));
}

// Traffic without the right e2b-traffic-access-token.
asio::awaitable<void> SendTrafficTokenError(api::HttpExchange& exchange, const std::string& sandbox_id, bool missing) {
  const std::string message =
      missing ? fmt::format("Sandbox is secured with traffic access token. Token header '{}' is missing",
                            api::kE2bTrafficTokenHeader)
              : fmt::format("Sandbox is secured with traffic access token. Provided token in header '{}' is invalid",
                            api::kE2bTrafficTokenHeader);
  co_await SendProxyError(exchange, http::status::forbidden, sandbox_id, message);
}

// A sandbox that does not exist (any more), or is paused and not resumed by traffic: the
// SDKs turn the 502 and its "was not found" into their not-running errors.
asio::awaitable<void> SendSandboxNotFound(api::HttpExchange& exchange, const std::string& sandbox_id) {
  co_await SendProxyError(exchange, http::status::bad_gateway, sandbox_id, "The sandbox was not found");
}

// A paused sandbox (paused or stopped: E2B's "paused") reached through the front, as E2B's
// proxy treats it: without autoResume, or stopped (a filesystem-only pause, which E2B resumes
// only when asked), it is not found; with it, traffic carrying the credentials the request
// needs (`authorized`) resumes it, other traffic is refused (403). True once it runs; else
// the answer is sent.
asio::awaitable<bool> ResumeForTraffic(E2bContext& context, api::HttpExchange& exchange,
                                       const core::SandboxInfo& sandbox, bool authorized) {
  if (sandbox.state == "stopped" || !sandbox.spec.e2b_auto_resume) {
    co_await SendSandboxNotFound(exchange, sandbox.id);
    co_return false;
  }
  if (!authorized) {
    co_await SendProxyError(exchange, http::status::forbidden, sandbox.id,
                            "This sandbox can't be resumed with the credentials provided. Check your access token "
                            "and try again.");
    co_return false;
  }
  core::SandboxManager& manager = context.manager;
  const std::string& id = sandbox.id;
  Result<core::SandboxInfo> resumed = co_await api::RunBlocking(context.blocking_pool, [&] { return manager.Resume(id); });
  // Another request may have resumed it first.
  if (!resumed.ok()) resumed = manager.Get(id);
  if (!resumed.ok() || resumed->state != "running") {
    co_await SendSandboxNotFound(exchange, id);
    co_return false;
  }
  co_return true;
}

// A port of the sandbox other than envd's: its own HTTP server, as a preview URL reaches it.
// Created with allowPublicTraffic false, it needs the traffic access token.
asio::awaitable<void> ServeSandboxPort(E2bContext& context, api::HttpExchange& exchange,
                                       const core::SandboxInfo& sandbox, uint16_t port) {
  const api::RequestHeader& request = exchange.request();
  const core::PreviewAccess& preview = sandbox.spec.preview;
  const api::PreviewVerdict verdict = preview.is_public
                                          ? api::PreviewVerdict::kAllowed
                                          : api::CheckTokenHeader(request, api::kE2bTrafficTokenHeader, preview.token);
  const bool allowed = verdict == api::PreviewVerdict::kAllowed;
  if (sandbox.state == "paused" || sandbox.state == "stopped") {
    const bool resumed = co_await ResumeForTraffic(context, exchange, sandbox, allowed);
    if (!resumed) co_return;
  }
  if (!allowed) co_return co_await SendTrafficTokenError(exchange, sandbox.id, verdict == api::PreviewVerdict::kMissing);
  const api::PortProxyRequest proxy{.sandbox_id = sandbox.id,
                                    .port = std::to_string(port),
                                    .app_target = std::string(api::FromBeast(request.target())),
                                    .by_host = true,
                                    .strip_authorization = false};
  Result<net::StreamSocket> app = co_await api::ConnectToPort(context.manager, proxy);
  if (app.ok()) co_return co_await api::RelayToPort(exchange, std::move(*app), proxy);
  if (app.error().detail_code == api::kPortNotListening) {
    // The SDKs match the message ("port is not open").
    json port_field = json::object();
    port_field["port"] = port;
    co_return co_await SendProxyError(exchange, http::status::bad_gateway, sandbox.id,
                                      "The sandbox is running but port is not open", std::move(port_field));
  }
  co_await SendE2bError(exchange, app.error());
}

// Traffic for `port` ("" = envd's) of sandbox `sandbox_id`, named by E2b-Sandbox-Id and
// E2b-Sandbox-Port or by host name: envd itself, or the sandbox's port.
asio::awaitable<std::string_view> ServeSandboxTraffic(E2bContext& context, api::HttpExchange& exchange,
                                                      std::string sandbox_id, std::string_view port,
                                                      api::RequestTarget& target) {
  const api::RequestHeader& request = exchange.request();
  const bool envd_port = port.empty() || port == kEnvdPort;
  // For the audit record (daemon/server.cc): the sandbox, and whether this is its own
  // server's traffic rather than a call of envd's.
  exchange.Note("target", sandbox_id);
  if (!envd_port) exchange.Note("app_port", std::string(port));
  const std::optional<uint16_t> port_number = envd_port ? std::nullopt : net::ParsePort(port);
  if (!envd_port && !port_number) {
    co_await SendE2bError(exchange, 400, fmt::format("invalid sandbox port \"{}\"", port));
    co_return "envd port";
  }
  if (!api::IsValidSandboxId(sandbox_id)) {
    co_await SendSandboxNotFound(exchange, sandbox_id);
    co_return "envd";
  }
  // Its state only (List, not Get: no usage readings on every envd call).
  const std::vector<core::SandboxInfo> found = context.manager.List(core::ListFilter{.id = sandbox_id});
  if (found.empty() || found.front().state == "error") {
    co_await SendSandboxNotFound(exchange, sandbox_id);
    co_return "envd";
  }
  const core::SandboxInfo& sandbox = found.front();
  if (!envd_port) {
    co_await ServeSandboxPort(context, exchange, sandbox, *port_number);
    co_return "envd port";
  }

  // envd's paths have no parameters: decoded whole. (The control plane decodes segments.)
  std::optional<std::string> decoded = api::PercentDecode(target.path, false);
  if (!decoded) {
    co_await SendE2bError(exchange, 400, "malformed request target");
    co_return "envd";
  }
  target.path = std::move(*decoded);
  const std::optional<std::string_view> refused =
      AccessRefusal(request, target, EnvdAccessToken(context.key, sandbox_id));
  if (sandbox.state == "paused" || sandbox.state == "stopped") {
    const bool resumed = co_await ResumeForTraffic(context, exchange, sandbox, !refused);
    if (!resumed) co_return "envd";
  }
  if (refused) {
    co_await SendE2bError(exchange, 401, *refused);
    co_return "envd";
  }
  Result<std::optional<std::string>> user = BasicAuthUser(api::FromBeast(request[http::field::authorization]));
  if (!user.ok()) {
    co_await SendE2bError(exchange, user.error());
    co_return "envd";
  }

  EnvdRequest envd{.exchange = exchange,
                   .context = context,
                   .sandbox_id = std::move(sandbox_id),
                   .user = std::move(*user),
                   .path = target.path,
                   .query = target.query};
  const bool post = request.method() == http::verb::post;
  static constexpr std::string_view kProcess = "/process.Process/";
  static constexpr std::string_view kFilesystem = "/filesystem.Filesystem/";
  if (target.path == "/health") {
    co_await exchange.SendNoContent();
    co_return "envd /health";
  }
  if (target.path == "/files") {
    co_await ServeFiles(envd);
    co_return "envd /files";
  }
  if (post && target.path.starts_with(kProcess)) {
    co_await ServeProcessService(envd, std::string_view(target.path).substr(kProcess.size()));
    co_return "envd process";
  }
  if (post && target.path.starts_with(kFilesystem)) {
    co_await ServeFilesystemService(envd, std::string_view(target.path).substr(kFilesystem.size()));
    co_return "envd filesystem";
  }
  co_await SendE2bError(exchange, 404, fmt::format("no envd route for {} {}", api::FromBeast(request.method_string()),
                                                   target.path));
  co_return "envd";
}

}  // namespace

std::string DefaultE2bDomain(std::string_view listen, uint16_t bound_port) {
  const size_t colon = listen.rfind(':');
  std::string host(listen.substr(0, colon == std::string_view::npos ? 0 : colon));
  const std::string bare = host.size() > 1 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2)
                                                                                         : host;
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(bare, ec);
  if (host.empty() || host == "localhost" || (!ec && (address.is_loopback() || address.is_unspecified()))) {
    host = "localhost";
  }
  return fmt::format("{}:{}", host, bound_port);
}

void E2bFront::ForgetTenant(const std::string& tenant) { ForgetTenantBuilds(*context_.templates, tenant); }

asio::awaitable<std::string_view> E2bFront::Handle(api::HttpExchange& exchange, std::optional<api::Caller>& caller) {
  const api::RequestHeader& request = exchange.request();
  std::optional<api::RequestTarget> target = api::ParseTarget(api::FromBeast(request.target()));
  if (!target) {
    co_await SendE2bError(exchange, 400, "malformed request target");
    co_return "unmatched";
  }
  // A host name {port}-{id}.{domain} (getHost) names the sandbox and port, as E2B's proxy
  // routes a named host; otherwise (E2B_SANDBOX_URL) the headers do.
  if (const std::optional<api::PreviewHost> host =
          api::MatchPreviewHost(api::FromBeast(request[http::field::host]), context_.domain)) {
    co_return co_await ServeSandboxTraffic(context_, exchange, host->sandbox_id, host->port, *target);
  }
  std::string sandbox_id(Header(request, "E2b-Sandbox-Id"));
  if (sandbox_id.empty() && target->path == "/files" && QueryValue(target->query, "signature")) {
    // A signed URL (uploadUrl/downloadUrl) used as is: with E2B_SANDBOX_URL it names no
    // sandbox, so the sandbox is the one whose token signed it.
    sandbox_id = SandboxOfSignature(context_, request, target->query);
    if (sandbox_id.empty()) {
      co_await SendE2bError(exchange, 401, kInvalidSignature);
      co_return "envd /files";
    }
  }
  if (!sandbox_id.empty()) {
    co_return co_await ServeSandboxTraffic(context_, exchange, std::move(sandbox_id),
                                           Header(request, "E2b-Sandbox-Port"), *target);
  }

  if (target->path == "/health") {  // the control plane's own, without a key
    const json ok = {{"status", "ok"}};
    co_await exchange.SendJson(http::status::ok, ok);
    co_return "/health";
  }
  if (target->path.starts_with(kTemplateUploadPrefix)) {  // signed: the SDKs send no key
    co_return co_await ServeTemplateUpload(context_, exchange, *target);
  }
  // The front's own key is the host's admin; a tenant's API key (bhk_...) is its tenant, as on
  // the API.
  const std::string_view key = Header(request, "X-API-KEY");
  if (api::ConstantTimeEquals(key, context_.key))
    caller = api::Caller{.key_id = "e2b"};
  else if (context_.keys && key.starts_with("bhk_"))
    caller = context_.keys->Authenticate("Bearer " + std::string(key));
  if (!caller) {
    co_await SendE2bError(exchange, 401, "Invalid API key, it must start with 'e2b_' and be the one bulkhead issued "
                                         "(<state dir>/e2b-api-key), or be a tenant's API key");
    co_return "unauthorized";
  }
  co_return co_await ServeControlPlane(context_, exchange, *target, *caller);
}

}  // namespace bulkhead::e2b
