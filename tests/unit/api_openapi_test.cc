// The served OpenAPI document must describe every route the router knows.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "api/router.h"

namespace bulkhead::api {
extern const std::string_view kOpenApiJson;
namespace {

using nlohmann::json;

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

TEST(OpenApi, IsAnOpenApi31DocumentWithBearerAuth) {
  const json doc = json::parse(kOpenApiJson);
  EXPECT_EQ(doc["openapi"], "3.1.0");
  EXPECT_EQ(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
  EXPECT_EQ(doc["security"], json::parse(R"([{"bearerAuth": []}])"));
  EXPECT_EQ(doc["paths"]["/healthz"]["get"]["security"], json::array());
  EXPECT_TRUE(doc["components"]["schemas"].contains("Error"));
}

TEST(OpenApi, DocumentsEveryRoute) {
  const json doc = json::parse(kOpenApiJson);
  for (auto [method, pattern] : AllRoutes()) {
    std::string path(pattern);
    if (const size_t rest = path.find("...}"); rest != std::string::npos) path.erase(rest, 3);  // {path...}
    ASSERT_TRUE(doc["paths"].contains(path)) << path;
    if (method == "*") {
      EXPECT_TRUE(doc["paths"][path].contains("get")) << path;
      EXPECT_TRUE(doc["paths"][path].contains("post")) << path;
    } else {
      EXPECT_TRUE(doc["paths"][path].contains(Lower(method))) << method << " " << path;
    }
  }
}

TEST(OpenApi, DocumentsNoRouteTheRouterDoesNotKnow) {
  const json doc = json::parse(kOpenApiJson);
  for (const auto& [path, operations] : doc["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) {
      std::string upper = method;
      std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
      std::string concrete = path;
      for (auto [name, value] : {std::pair{"{id}", "x"}, {"{name}", "n"}, {"{pid}", "1"}, {"{port}", "80"},
                                 {"{path}", "p"}, {"{snapshot_id}", "s"}}) {
        if (size_t at = concrete.find(name); at != std::string::npos) concrete.replace(at, std::string(name).size(), value);
      }
      EXPECT_EQ(MatchRoute(upper, concrete).outcome, RouteMatch::Outcome::kMatched) << upper << " " << path;
    }
  }
}

TEST(OpenApi, EveryApiOperationDocumentsHeadersTooLarge) {
  // The server answers 431 to any request whose line and headers exceed its limit, before
  // routing: a long path or query string of any operation can get it.
  const json doc = json::parse(kOpenApiJson);
  EXPECT_TRUE(doc["components"]["responses"].contains("HeadersTooLarge"));
  for (const auto& [path, operations] : doc["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) {
      if (!operation["responses"].contains("500")) continue;  // /healthz, and the port proxy's "default"
      EXPECT_TRUE(operation["responses"].contains("431")) << method << " " << path;
    }
  }
}

}  // namespace
}  // namespace bulkhead::api
