// The heads the port proxy writes: what reaches a sandbox's app from the client (never the
// bulkhead key, never the client's connection headers) and what reaches the client from the
// app. The proxying itself is tested end to end in tests/integration/test_ports.py.
#include "service/port_proxy.h"

#include <gtest/gtest.h>

namespace bulkhead::api {
namespace {

RequestHeader ClientRequest() {
  RequestHeader request{http::verb::post, "/v1/sandboxes/sb1/ports/8000/api?x=1", 11};
  request.set(http::field::host, "127.0.0.1:7420");
  request.set(http::field::authorization, "Bearer the-bulkhead-key");
  request.set(http::field::connection, "keep-alive, X-Private-Hop");
  request.set("X-Private-Hop", "secret-for-the-next-hop-only");
  request.set(http::field::keep_alive, "timeout=5");
  request.set(http::field::te, "trailers");
  request.set(http::field::proxy_authorization, "Basic Zm9vOmJhcg==");
  request.set(http::field::expect, "100-continue");
  request.set(http::field::content_type, "application/json");
  request.set(http::field::content_length, "42");
  request.set(http::field::cookie, "session=abc");
  request.set("X-Forwarded-Prefix", "/spoofed");
  request.set("X-Forwarded-Proto", "https");
  request.insert("X-Custom", "one");
  request.insert("X-Custom", "two");
  return request;
}

PortProxyRequest PathRoute() {
  return PortProxyRequest{.sandbox_id = "sb1", .port = "8000", .app_target = "/api?x=1"};
}

std::string Get(const RequestHeader& head, std::string_view name) {
  return std::string(FromBeast(head[ToBeast(name)]));
}

TEST(AppRequestHead, PathRouteDropsTheKeyAndHopByHopHeadersAndSaysWhereItCameFrom) {
  const RequestHeader head = AppRequestHead(ClientRequest(), PathRoute(), "10.1.2.3", /*upgrade=*/false);
  EXPECT_EQ(FromBeast(head.method_string()), "POST");
  EXPECT_EQ(FromBeast(head.target()), "/api?x=1");
  EXPECT_EQ(head.version(), 11u);
  EXPECT_EQ(head.count(http::field::authorization), 0u);
  EXPECT_EQ(head.count(http::field::proxy_authorization), 0u);
  EXPECT_EQ(head.count(http::field::keep_alive), 0u);
  EXPECT_EQ(head.count(http::field::te), 0u);
  EXPECT_EQ(head.count("X-Private-Hop"), 0u);  // named in Connection
  EXPECT_EQ(head.count(http::field::expect), 0u);  // the proxy answers 100-continue itself
  EXPECT_EQ(Get(head, "Connection"), "close");
  EXPECT_EQ(Get(head, "Host"), "localhost:8000");
  EXPECT_EQ(Get(head, "X-Forwarded-Host"), "127.0.0.1:7420");
  EXPECT_EQ(Get(head, "X-Forwarded-Proto"), "http");
  EXPECT_EQ(Get(head, "X-Forwarded-Prefix"), "/v1/sandboxes/sb1/ports/8000");
  EXPECT_EQ(head.count("X-Forwarded-Prefix"), 1u);
  EXPECT_EQ(Get(head, "X-Forwarded-For"), "10.1.2.3");
  EXPECT_EQ(Get(head, "Content-Length"), "42");
  EXPECT_EQ(Get(head, "Content-Type"), "application/json");
  EXPECT_EQ(Get(head, "Cookie"), "session=abc");
  EXPECT_EQ(head.count("X-Custom"), 2u);
}

TEST(AppRequestHead, HostRouteKeepsHostAndPathAndAnAppsOwnAuthorization) {
  RequestHeader client = ClientRequest();
  client.target("/api?x=1");
  client.set(http::field::host, "8000-sb1.localhost:7420");
  client.set(http::field::authorization, "Basic dXNlcjpwYXNz");
  client.set("X-Forwarded-For", "192.0.2.1");
  PortProxyRequest request = PathRoute();
  request.by_host = true;
  request.strip_authorization = false;  // not the bulkhead key
  const RequestHeader head = AppRequestHead(client, request, "127.0.0.1", false);
  EXPECT_EQ(Get(head, "Host"), "8000-sb1.localhost:7420");
  EXPECT_EQ(Get(head, "Authorization"), "Basic dXNlcjpwYXNz");
  EXPECT_EQ(head.count("X-Forwarded-Prefix"), 0u);
  EXPECT_EQ(Get(head, "X-Forwarded-For"), "192.0.2.1, 127.0.0.1");
  request.strip_authorization = true;  // it was the bulkhead key
  EXPECT_EQ(AppRequestHead(client, request, "", false).count(http::field::authorization), 0u);
}

TEST(AppRequestHead, PreviewCredentialsStayBehindAndTheAppsCookiesPass) {
  RequestHeader client = ClientRequest();
  client.set("Bulkhead-Preview-Token", "the-token");
  client.set("E2b-Traffic-Access-Token", "the-token");
  client.set(http::field::cookie, "session=abc; bulkhead_preview_token=the-token; theme=dark");
  PortProxyRequest request = PathRoute();
  request.by_host = true;
  const RequestHeader head = AppRequestHead(client, request, "", false);
  EXPECT_EQ(head.count("Bulkhead-Preview-Token"), 0u);
  EXPECT_EQ(head.count("e2b-traffic-access-token"), 0u);
  EXPECT_EQ(Get(head, "Cookie"), "session=abc; theme=dark");
  client.set(http::field::cookie, "bulkhead_preview_token=the-token");
  EXPECT_EQ(AppRequestHead(client, request, "", false).count(http::field::cookie), 0u);
}

TEST(AppRequestHead, ChunkedBodiesStayChunkedAndUpgradesKeepTheirHeaders) {
  RequestHeader client{http::verb::put, "/x", 11};
  client.set(http::field::host, "h");
  client.set(http::field::transfer_encoding, "chunked");
  EXPECT_EQ(Get(AppRequestHead(client, PathRoute(), "", false), "Transfer-Encoding"), "chunked");
  EXPECT_EQ(AppRequestHead(client, PathRoute(), "", false).count(http::field::content_length), 0u);

  RequestHeader websocket{http::verb::get, "/ws", 11};
  websocket.set(http::field::host, "h");
  websocket.set(http::field::connection, "keep-alive, Upgrade");
  websocket.set(http::field::upgrade, "websocket");
  websocket.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  websocket.set(http::field::sec_websocket_version, "13");
  ASSERT_TRUE(IsUpgradeRequest(websocket));
  const RequestHeader head = AppRequestHead(websocket, PathRoute(), "", true);
  EXPECT_EQ(Get(head, "Upgrade"), "websocket");
  EXPECT_EQ(Get(head, "Connection"), "Upgrade");
  EXPECT_EQ(Get(head, "Sec-WebSocket-Key"), "dGhlIHNhbXBsZSBub25jZQ==");
  EXPECT_EQ(head.count(http::field::transfer_encoding), 0u);
  EXPECT_EQ(head.count(http::field::content_length), 0u);
}

TEST(IsUpgradeRequest, NeedsBothHeaders) {
  RequestHeader request{http::verb::get, "/", 11};
  EXPECT_FALSE(IsUpgradeRequest(request));
  request.set(http::field::upgrade, "tcp");
  EXPECT_FALSE(IsUpgradeRequest(request));
  request.set(http::field::connection, "close");
  EXPECT_FALSE(IsUpgradeRequest(request));
  request.set(http::field::connection, "UPGRADE");
  EXPECT_TRUE(IsUpgradeRequest(request));
}

TEST(ClientResponseHead, KeepsTheBodysFramingAndClosesTheConnection) {
  http::response_header<> app;
  app.version(11);
  app.result(http::status::ok);
  app.reason("Fine");
  app.set(http::field::content_type, "text/event-stream");
  app.set(http::field::transfer_encoding, "chunked");
  app.set(http::field::connection, "keep-alive, X-Hop");
  app.set("X-Hop", "1");
  app.set(http::field::keep_alive, "timeout=5");
  app.set(http::field::upgrade, "h2c");
  app.insert(http::field::set_cookie, "a=1");
  app.insert(http::field::set_cookie, "b=2");
  const auto head = ClientResponseHead(app, 11);
  EXPECT_EQ(head.result_int(), 200u);
  EXPECT_EQ(FromBeast(head.reason()), "Fine");
  EXPECT_EQ(FromBeast(head[http::field::transfer_encoding]), "chunked");
  EXPECT_EQ(FromBeast(head[http::field::content_type]), "text/event-stream");
  EXPECT_EQ(FromBeast(head[http::field::connection]), "close");
  EXPECT_EQ(head.count("X-Hop"), 0u);
  EXPECT_EQ(head.count(http::field::keep_alive), 0u);
  EXPECT_EQ(head.count(http::field::upgrade), 0u);
  EXPECT_EQ(head.count(http::field::set_cookie), 2u);
  EXPECT_EQ(ClientResponseHead(app, 10).version(), 10u);  // an HTTP/1.0 client gets a 1.0 answer
}

TEST(ClientResponseHead, SwitchingProtocolsKeepsUpgrade) {
  http::response_header<> app;
  app.version(11);
  app.result(http::status::switching_protocols);
  app.set(http::field::upgrade, "websocket");
  app.set(http::field::connection, "Upgrade");
  app.set(http::field::sec_websocket_accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  const auto head = ClientResponseHead(app, 11);
  EXPECT_EQ(head.result_int(), 101u);
  EXPECT_EQ(FromBeast(head[http::field::upgrade]), "websocket");
  EXPECT_EQ(FromBeast(head[http::field::connection]), "Upgrade");
  EXPECT_EQ(FromBeast(head[http::field::sec_websocket_accept]), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

}  // namespace
}  // namespace bulkhead::api
