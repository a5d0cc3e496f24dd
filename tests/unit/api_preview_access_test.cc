// Who may reach a sandbox's port by preview host name (service/preview_access.h): the verdicts
// for each way of carrying the token, and the target and cookies the app gets. Served end to
// end in tests/integration/test_ports.py.
#include "service/preview_access.h"

#include <gtest/gtest.h>

namespace bulkhead::api {
namespace {

constexpr std::string_view kToken = "5f0e2b6d7c1a4e3f8b9c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c";
const core::PreviewAccess kPrivate{.is_public = false, .token = std::string(kToken)};

RequestHeader Request(http::verb method = http::verb::get, std::string_view target = "/") {
  RequestHeader request{method, std::string(target), 11};
  request.set(http::field::host, "8000-sb1.localhost:7420");
  return request;
}

PreviewVerdict Decide(const RequestHeader& request, bool has_api_key = false) {
  return DecidePreviewAccess(request, kPrivate, has_api_key);
}

TEST(PreviewAccess, APublicSandboxNeedsNothing) {
  EXPECT_EQ(DecidePreviewAccess(Request(), core::PreviewAccess{}, false), PreviewVerdict::kAllowed);
}

TEST(PreviewAccess, APrivateOneNeedsItsTokenInAHeader) {
  EXPECT_EQ(Decide(Request()), PreviewVerdict::kMissing);
  for (const char* header : {"Bulkhead-Preview-Token", "bulkhead-preview-token", "e2b-traffic-access-token"}) {
    RequestHeader request = Request(http::verb::post);
    request.set(header, std::string(kToken));
    EXPECT_EQ(Decide(request), PreviewVerdict::kAllowed) << header;
    request.set(header, std::string(kToken.substr(1)));
    EXPECT_EQ(Decide(request), PreviewVerdict::kInvalid) << header;
    request.set(header, std::string(kToken) + "0");
    EXPECT_EQ(Decide(request), PreviewVerdict::kInvalid) << header;
  }
  RequestHeader empty = Request();
  empty.set("Bulkhead-Preview-Token", "");
  EXPECT_EQ(Decide(empty), PreviewVerdict::kMissing);
}

TEST(PreviewAccess, TheApiKeyOpensItToo) {
  EXPECT_EQ(Decide(Request(), /*has_api_key=*/true), PreviewVerdict::kAllowed);
}

TEST(PreviewAccess, APrivateSandboxWithoutATokenOpensToNoToken) {
  RequestHeader request = Request(http::verb::get, "/?bulkhead_preview_token=");
  request.set("Bulkhead-Preview-Token", "x");
  EXPECT_EQ(DecidePreviewAccess(request, core::PreviewAccess{.is_public = false}, false), PreviewVerdict::kMissing);
}

TEST(PreviewAccess, TheQueryTokenOnAGetSetsTheCookie) {
  const std::string link = "/app/?x=1&bulkhead_preview_token=" + std::string(kToken);
  EXPECT_EQ(Decide(Request(http::verb::get, link)), PreviewVerdict::kSetCookie);
  EXPECT_EQ(Decide(Request(http::verb::head, link)), PreviewVerdict::kSetCookie);
  EXPECT_EQ(Decide(Request(http::verb::get, "/?bulkhead_preview_token=wrong")), PreviewVerdict::kInvalid);
  EXPECT_EQ(Decide(Request(http::verb::get, "/?bulkhead_preview_token=%zz")), PreviewVerdict::kInvalid);
  // Not for other methods: a redirect would turn them into a GET.
  EXPECT_EQ(Decide(Request(http::verb::post, link)), PreviewVerdict::kMissing);
}

TEST(PreviewAccess, TheCookieCountsForThePagesOwnRequestsAndNavigations) {
  RequestHeader request = Request();
  request.set(http::field::cookie, "a=1; bulkhead_preview_token=" + std::string(kToken) + "; b=2");
  EXPECT_EQ(Decide(request), PreviewVerdict::kAllowed);  // no Sec-Fetch-*: not a browser
  request.set("Sec-Fetch-Site", "same-origin");
  request.set("Sec-Fetch-Mode", "cors");
  EXPECT_EQ(Decide(request), PreviewVerdict::kAllowed);
  request.set("Sec-Fetch-Site", "none");  // typed into the address bar
  request.set("Sec-Fetch-Mode", "navigate");
  EXPECT_EQ(Decide(request), PreviewVerdict::kAllowed);
  request.set("Sec-Fetch-Site", "cross-site");  // a link followed from elsewhere
  EXPECT_EQ(Decide(request), PreviewVerdict::kAllowed);
  // Another sandbox's page (the same site under one preview domain) sending requests with it.
  request.set("Sec-Fetch-Site", "same-site");
  request.set("Sec-Fetch-Mode", "no-cors");
  EXPECT_EQ(Decide(request), PreviewVerdict::kMissing);
  request.set("Sec-Fetch-Mode", "navigate");
  request.method(http::verb::post);  // a form posted from there
  EXPECT_EQ(Decide(request), PreviewVerdict::kMissing);

  RequestHeader wrong = Request();
  wrong.set(http::field::cookie, "bulkhead_preview_token=nope");
  EXPECT_EQ(Decide(wrong), PreviewVerdict::kInvalid);
}

TEST(PreviewAccess, CheckTokenHeaderReadsEveryInstance) {
  RequestHeader request = Request();
  EXPECT_EQ(CheckTokenHeader(request, kE2bTrafficTokenHeader, kToken), PreviewVerdict::kMissing);
  request.insert("e2b-traffic-access-token", "wrong");
  EXPECT_EQ(CheckTokenHeader(request, kE2bTrafficTokenHeader, kToken), PreviewVerdict::kInvalid);
  request.insert("e2b-traffic-access-token", std::string(kToken));
  EXPECT_EQ(CheckTokenHeader(request, kE2bTrafficTokenHeader, kToken), PreviewVerdict::kAllowed);
  EXPECT_EQ(CheckTokenHeader(request, kE2bTrafficTokenHeader, ""), PreviewVerdict::kInvalid);
}

TEST(WithoutPreviewTokenParam, DropsOnlyTheToken) {
  EXPECT_EQ(WithoutPreviewTokenParam("/a/b"), "/a/b");
  EXPECT_EQ(WithoutPreviewTokenParam("/a?x=1&&y"), "/a?x=1&&y");  // untouched without a token
  EXPECT_EQ(WithoutPreviewTokenParam("/a?bulkhead_preview_token=t"), "/a");
  EXPECT_EQ(WithoutPreviewTokenParam("/a?x=1&bulkhead_preview_token=t&y=%20"), "/a?x=1&y=%20");
  EXPECT_EQ(WithoutPreviewTokenParam("/?bulkhead%5Fpreview%5Ftoken=t&bulkhead_preview_token"), "/");
  EXPECT_EQ(WithoutPreviewTokenParam("/?bulkhead_preview_tokens=t"), "/?bulkhead_preview_tokens=t");
}

TEST(CookiesWithoutPreviewToken, KeepsTheOthers) {
  EXPECT_EQ(CookiesWithoutPreviewToken("a=1; bulkhead_preview_token=t; b=2"), "a=1; b=2");
  EXPECT_EQ(CookiesWithoutPreviewToken(" bulkhead_preview_token=t "), "");
  EXPECT_EQ(CookiesWithoutPreviewToken("a=1;b=2"), "a=1; b=2");
  EXPECT_EQ(CookiesWithoutPreviewToken("bulkhead_preview_token_x=1"), "bulkhead_preview_token_x=1");
}

}  // namespace
}  // namespace bulkhead::api
