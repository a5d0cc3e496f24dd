#include "service/preview_access.h"

#include <cctype>
#include <optional>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <fmt/format.h>

#include "http/request_target.h"
#include "service/api_key.h"
#include "service/port_proxy.h"
#include "service/validate.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls `each(piece)` for the pieces of `text` between `separator`s.
template <typename Each>
void ForEachPiece(std::string_view text, char separator, Each each) {
  while (!text.empty()) {
    const size_t at = text.find(separator);
    each(text.substr(0, at));
    text = at == std::string_view::npos ? std::string_view() : text.substr(at + 1);
  }
}

// Whether a raw query piece ("key=value") is the token parameter.
bool IsTokenParam(std::string_view piece) {
  const std::optional<std::string> key = PercentDecode(piece.substr(0, piece.find('=')), true);
  return key && *key == kPreviewTokenName;
}

// The token parameter's value, if the target's query has one.
std::optional<std::string> QueryToken(std::string_view target) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return std::nullopt;
  std::optional<std::string> token;
  ForEachPiece(target.substr(question + 1), '&', [&](std::string_view piece) {
    if (token || !IsTokenParam(piece)) return;
    const size_t equals = piece.find('=');
    token = PercentDecode(equals == std::string_view::npos ? std::string_view() : piece.substr(equals + 1), true);
    if (!token) token = "";  // malformed: presented, and wrong
  });
  return token;
}

bool IsCookieNamed(std::string_view cookie, std::string_view name) {
  return TrimSpaces(cookie.substr(0, cookie.find('='))) == name;
}

// Whether the browser says the request is the page's own or a navigation to it. Clients
// that send no Sec-Fetch-Site (not a browser, or an old one) are taken at their word.
bool MayUseCookie(const RequestHeader& request) {
  const std::string_view site = FromBeast(request["Sec-Fetch-Site"]);
  if (site.empty() || beast::iequals(ToBeast(site), "same-origin") || beast::iequals(ToBeast(site), "none")) {
    return true;
  }
  const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
  return get && beast::iequals(request["Sec-Fetch-Mode"], "navigate");
}

}  // namespace

PreviewVerdict CheckTokenHeader(const RequestHeader& request, std::string_view header, std::string_view token) {
  PreviewVerdict verdict = PreviewVerdict::kMissing;
  const auto [first, last] = request.equal_range(ToBeast(header));
  for (auto field = first; field != last; ++field) {
    const std::string_view value = TrimSpaces(FromBeast(field->value()));
    if (value.empty()) continue;
    if (!token.empty() && ConstantTimeEquals(value, token)) return PreviewVerdict::kAllowed;
    verdict = PreviewVerdict::kInvalid;
  }
  return verdict;
}

PreviewVerdict DecidePreviewAccess(const RequestHeader& request, const core::PreviewAccess& preview,
                                   bool has_api_key) {
  if (preview.is_public || has_api_key) return PreviewVerdict::kAllowed;
  const std::string_view token = preview.token;
  if (token.empty()) return PreviewVerdict::kMissing;  // private without a token: nobody's
  bool presented = false;
  const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
  if (get) {
    if (const std::optional<std::string> query = QueryToken(FromBeast(request.target()))) {
      if (ConstantTimeEquals(*query, token)) return PreviewVerdict::kSetCookie;
      presented = true;
    }
  }
  for (const std::string_view header : {kPreviewTokenHeader, kE2bTrafficTokenHeader}) {
    const PreviewVerdict verdict = CheckTokenHeader(request, header, token);
    if (verdict == PreviewVerdict::kAllowed) return verdict;
    presented = presented || verdict == PreviewVerdict::kInvalid;
  }
  if (MayUseCookie(request)) {
    bool allowed = false;
    const auto [first, last] = request.equal_range(http::field::cookie);
    for (auto field = first; field != last; ++field) {
      ForEachPiece(FromBeast(field->value()), ';', [&](std::string_view cookie) {
        if (!IsCookieNamed(cookie, kPreviewTokenName)) return;
        presented = true;
        const size_t equals = cookie.find('=');
        const std::string_view value = equals == std::string_view::npos ? "" : TrimSpaces(cookie.substr(equals + 1));
        allowed = ConstantTimeEquals(value, token) || allowed;
      });
    }
    if (allowed) return PreviewVerdict::kAllowed;
  }
  return presented ? PreviewVerdict::kInvalid : PreviewVerdict::kMissing;
}

std::string WithoutPreviewTokenParam(std::string_view target) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return std::string(target);
  std::string kept;
  bool found = false;
  ForEachPiece(target.substr(question + 1), '&', [&](std::string_view piece) {
    if (IsTokenParam(piece)) {
      found = true;
    } else if (!piece.empty()) {
      kept += kept.empty() ? "" : "&";
      kept += piece;
    }
  });
  if (!found) return std::string(target);
  std::string out(target.substr(0, question));
  if (!kept.empty()) out += "?" + kept;
  return out;
}

std::string CookiesWithoutPreviewToken(std::string_view cookies) {
  std::string kept;
  ForEachPiece(cookies, ';', [&](std::string_view cookie) {
    cookie = TrimSpaces(cookie);
    if (cookie.empty() || IsCookieNamed(cookie, kPreviewTokenName)) return;
    kept += kept.empty() ? "" : "; ";
    kept += cookie;
  });
  return kept;
}

asio::awaitable<void> ServePreviewHost(HttpExchange& exchange, core::SandboxManager& manager,
                                       const PreviewHost& host, const std::optional<Caller>& caller) {
  const std::string target(FromBeast(exchange.request().target()));
  if (target.empty() || target[0] != '/') {
    co_return co_await exchange.SendError(MakeError(ErrorCode::kBadRequest, "malformed request target"));
  }
  // Its state only (List, not Get: no usage readings on every request).
  std::vector<core::SandboxInfo> found;
  if (IsValidSandboxId(host.sandbox_id)) found = manager.List(core::ListFilter{.id = host.sandbox_id});
  if (found.empty()) co_return co_await exchange.SendError(SandboxNotFound(host.sandbox_id));
  const core::PreviewAccess& preview = found.front().spec.preview;
  const bool has_api_key = caller && (caller->HostAdmin() || caller->tenant == found.front().spec.tenant);
  switch (DecidePreviewAccess(exchange.request(), preview, has_api_key)) {
    case PreviewVerdict::kAllowed:
      break;
    case PreviewVerdict::kSetCookie:
      // Host-only (no Domain): the cookie opens this sandbox's port and nothing else.
      exchange.SetResponseHeader(http::field::set_cookie, fmt::format("{}={}; Path=/; HttpOnly; SameSite=Lax",
                                                                      kPreviewTokenName, preview.token));
      exchange.SetResponseHeader(http::field::location, WithoutPreviewTokenParam(target));
      exchange.SetResponseHeader(http::field::cache_control, "no-store");
      co_return co_await exchange.SendText(http::status::see_other, "text/plain", "");
    case PreviewVerdict::kMissing:
      co_return co_await exchange.SendError(MakeError(
          ErrorCode::kForbidden,
          fmt::format("sandbox {} has a private preview: send its preview token in the {} header, or open the URL "
                      "once with ?{}=<token> (the token is in the sandbox's \"preview\")",
                      host.sandbox_id, kPreviewTokenHeader, kPreviewTokenName),
          "preview_token_required"));
    case PreviewVerdict::kInvalid:
      co_return co_await exchange.SendError(MakeError(
          ErrorCode::kForbidden, fmt::format("that is not the preview token of sandbox {}", host.sandbox_id),
          "preview_token_invalid"));
  }
  const PortProxyRequest request{.sandbox_id = host.sandbox_id,
                                 .port = host.port,
                                 .app_target = WithoutPreviewTokenParam(target),
                                 .by_host = true,
                                 .strip_authorization = caller.has_value()};  // (a key of ours never reaches the app)
  co_await ServePortProxy(exchange, manager, request);
}

std::optional<PreviewHost> MatchPreviewHost(std::string_view host, std::string_view preview_domain) {
  if (preview_domain.empty() || host.size() <= preview_domain.size() + 1) return std::nullopt;
  std::string lower(host);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string domain(preview_domain);
  for (char& c : domain) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t label_size = lower.size() - domain.size() - 1;
  if (lower.compare(label_size + 1, std::string::npos, domain) != 0 || lower[label_size] != '.') return std::nullopt;
  const std::string label = lower.substr(0, label_size);
  // The port has no '-'; the id may (so the first '-' splits).
  const size_t dash = label.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == label.size()) return std::nullopt;
  return PreviewHost{label.substr(0, dash), label.substr(dash + 1)};
}

}  // namespace bulkhead::api
