#include "api/router.h"

#include <gtest/gtest.h>

#include <tuple>

#include "service/preview_access.h"

namespace bulkhead::api {
namespace {

using Outcome = RouteMatch::Outcome;

TEST(MatchRoute, ServedRoutes) {
  struct Case {
    const char* method;
    const char* path;
    RouteId id;
  };
  for (const Case& c : {Case{"GET", "/healthz", RouteId::kHealthz}, Case{"GET", "/metrics", RouteId::kMetrics},
                        Case{"GET", "/openapi.json", RouteId::kOpenApi},
                        Case{"POST", "/v1/sandboxes", RouteId::kCreateSandbox},
                        Case{"GET", "/v1/sandboxes", RouteId::kListSandboxes},
                        Case{"GET", "/v1/sandboxes/sb1", RouteId::kGetSandbox},
                        Case{"DELETE", "/v1/sandboxes/sb1", RouteId::kDeleteSandbox},
                        Case{"POST", "/v1/sandboxes/sb1/timeout", RouteId::kSetSandboxTimeout},
                        Case{"POST", "/v1/sandboxes/sb1/exec", RouteId::kExec},
                        Case{"GET", "/v1/images", RouteId::kListImages},
                        Case{"PUT", "/v1/images/alpine", RouteId::kPutImage},
                        Case{"DELETE", "/v1/images/alpine", RouteId::kDeleteImage}}) {
    const RouteMatch match = MatchRoute(c.method, c.path);
    EXPECT_EQ(match.outcome, Outcome::kMatched) << c.method << " " << c.path;
    EXPECT_EQ(match.id, c.id) << c.method << " " << c.path;
  }
}

TEST(MatchRoute, FileRoutes) {
  for (auto [method, path, id] : {std::tuple{"GET", "/v1/sandboxes/sb1/files", RouteId::kReadFile},
                                  std::tuple{"PUT", "/v1/sandboxes/sb1/files", RouteId::kWriteFile},
                                  std::tuple{"DELETE", "/v1/sandboxes/sb1/files", RouteId::kDeleteFile},
                                  std::tuple{"GET", "/v1/sandboxes/sb1/files/stat", RouteId::kStatFile},
                                  std::tuple{"GET", "/v1/sandboxes/sb1/files/list", RouteId::kListFiles},
                                  std::tuple{"POST", "/v1/sandboxes/sb1/files/mkdir", RouteId::kMakeDirectory},
                                  std::tuple{"POST", "/v1/sandboxes/sb1/files/move", RouteId::kMoveFile},
                                  std::tuple{"GET", "/v1/sandboxes/sb1/files/archive", RouteId::kDownloadArchive},
                                  std::tuple{"PUT", "/v1/sandboxes/sb1/files/archive", RouteId::kUploadArchive},
                                  std::tuple{"GET", "/v1/sandboxes/sb1/files/watch", RouteId::kWatchFiles}}) {
    const RouteMatch match = MatchRoute(method, path);
    EXPECT_EQ(match.outcome, Outcome::kMatched) << method << " " << path;
    EXPECT_EQ(match.id, id) << method << " " << path;
    EXPECT_EQ(match.Param("id"), "sb1");
  }
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/sb1/files").allowed_methods, "GET, PUT, DELETE");
}

TEST(MatchRoute, ProcessRoutes) {
  for (auto [method, path, id] :
       {std::tuple{"POST", "/v1/sandboxes/sb1/processes", RouteId::kCreateProcess},
        std::tuple{"GET", "/v1/sandboxes/sb1/processes", RouteId::kListProcesses},
        std::tuple{"GET", "/v1/sandboxes/sb1/processes/12", RouteId::kGetProcess},
        std::tuple{"GET", "/v1/sandboxes/sb1/processes/12/output", RouteId::kProcessOutput},
        std::tuple{"POST", "/v1/sandboxes/sb1/processes/12/stdin", RouteId::kProcessStdin},
        std::tuple{"POST", "/v1/sandboxes/sb1/processes/12/stdin/close", RouteId::kProcessStdinClose},
        std::tuple{"POST", "/v1/sandboxes/sb1/processes/12/signal", RouteId::kProcessSignal},
        std::tuple{"POST", "/v1/sandboxes/sb1/processes/12/resize", RouteId::kProcessResize},
        std::tuple{"GET", "/v1/sandboxes/sb1/processes/12/attach", RouteId::kProcessAttach}}) {
    const RouteMatch match = MatchRoute(method, path);
    EXPECT_EQ(match.outcome, Outcome::kMatched) << method << " " << path;
    EXPECT_EQ(match.id, id) << method << " " << path;
    EXPECT_EQ(match.Param("id"), "sb1");
  }
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/sb1/processes/web%20app").Param("pid"), "web app");  // a tag
  EXPECT_EQ(MatchRoute("DELETE", "/v1/sandboxes/sb1/processes/12").allowed_methods, "GET");
}

TEST(MatchRoute, ExtractsParametersAndPattern) {
  const RouteMatch exec = MatchRoute("POST", "/v1/sandboxes/abc-123/exec");
  EXPECT_EQ(exec.Param("id"), "abc-123");
  EXPECT_EQ(exec.pattern, "/v1/sandboxes/{id}/exec");
  EXPECT_EQ(exec.Param("missing"), "");
  const RouteMatch image = MatchRoute("PUT", "/v1/images/my.image");
  EXPECT_EQ(image.Param("name"), "my.image");
  EXPECT_EQ(image.pattern, "/v1/images/{name}");
}

TEST(MatchRoute, DecodesPercentEscapesInSegments) {
  const RouteMatch match = MatchRoute("GET", "/v1/sandboxes/a%2Fb");
  ASSERT_EQ(match.outcome, Outcome::kMatched);
  EXPECT_EQ(match.Param("id"), "a/b");  // one segment; the handler rejects the id
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/a%zz").outcome, Outcome::kNotFound);
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/a%2").outcome, Outcome::kNotFound);
}

TEST(MatchRoute, UnknownPathsAreNotFound) {
  for (const char* path : {"/", "", "nope", "/v1", "/v2/sandboxes", "/v1/sandboxes/", "/v1/sandboxes//exec",
                           "/v1/sandboxes/x/exec/more", "/healthz/", "/v1/sandboxes/x/unknown", "//healthz"}) {
    const RouteMatch match = MatchRoute("GET", path);
    EXPECT_EQ(match.outcome, Outcome::kNotFound) << path;
    EXPECT_EQ(match.pattern, "unmatched") << path;
    EXPECT_TRUE(match.NeedsAuth()) << path;
  }
}

TEST(MatchRoute, KnownPathWithWrongMethodListsAllowedMethods) {
  const RouteMatch sandbox = MatchRoute("PATCH", "/v1/sandboxes/x");
  EXPECT_EQ(sandbox.outcome, Outcome::kMethodNotAllowed);
  EXPECT_EQ(sandbox.allowed_methods, "GET, DELETE");
  EXPECT_EQ(sandbox.pattern, "/v1/sandboxes/{id}");
  const RouteMatch collection = MatchRoute("DELETE", "/v1/sandboxes");
  EXPECT_EQ(collection.outcome, Outcome::kMethodNotAllowed);
  EXPECT_EQ(collection.allowed_methods, "POST, GET");
  EXPECT_EQ(MatchRoute("POST", "/healthz").outcome, Outcome::kMethodNotAllowed);
  EXPECT_EQ(MatchRoute("get", "/healthz").outcome, Outcome::kMethodNotAllowed);  // methods are case-sensitive
}

TEST(MatchRoute, ConcretePathWinsOverATemplatedOne) {
  // /v1/snapshots/import also fits /v1/snapshots/{snapshot_id}, but only POST exists there.
  EXPECT_EQ(MatchRoute("POST", "/v1/snapshots/import").id, RouteId::kImportSnapshot);
  const RouteMatch get = MatchRoute("GET", "/v1/snapshots/import");
  EXPECT_EQ(get.outcome, Outcome::kMethodNotAllowed);
  EXPECT_EQ(get.allowed_methods, "POST");
  EXPECT_EQ(MatchRoute("OPTIONS", "/v1/snapshots/import").allowed_methods, "POST");
  // Any other id is a snapshot's.
  EXPECT_EQ(MatchRoute("GET", "/v1/snapshots/imports").id, RouteId::kGetSnapshot);
  EXPECT_EQ(MatchRoute("DELETE", "/v1/snapshots/x").id, RouteId::kDeleteSnapshot);
}

TEST(MatchRoute, LifecycleRoutes) {
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/pause").id, RouteId::kPauseSandbox);
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/resume").id, RouteId::kResumeSandbox);
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/stop").id, RouteId::kStopSandbox);
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/start").id, RouteId::kStartSandbox);
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/x/pause").outcome, Outcome::kMethodNotAllowed);
}

TEST(MatchRoute, VolumeRoutes) {
  EXPECT_EQ(MatchRoute("POST", "/v1/volumes").id, RouteId::kCreateVolume);
  EXPECT_EQ(MatchRoute("GET", "/v1/volumes").id, RouteId::kListVolumes);
  const RouteMatch get = MatchRoute("GET", "/v1/volumes/cache");
  EXPECT_EQ(get.id, RouteId::kGetVolume);
  EXPECT_EQ(get.Param("name"), "cache");
  EXPECT_EQ(MatchRoute("DELETE", "/v1/volumes/cache").id, RouteId::kDeleteVolume);
  EXPECT_EQ(MatchRoute("PUT", "/v1/volumes/cache").outcome, Outcome::kMethodNotAllowed);
}

TEST(MatchRoute, SnapshotRoutes) {
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/snapshots").id, RouteId::kCreateSnapshot);
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/fork").id, RouteId::kForkSandbox);
  EXPECT_EQ(MatchRoute("GET", "/v1/snapshots").id, RouteId::kListSnapshots);
  const RouteMatch get = MatchRoute("GET", "/v1/snapshots/s1");
  EXPECT_EQ(get.id, RouteId::kGetSnapshot);
  EXPECT_EQ(get.Param("snapshot_id"), "s1");
  EXPECT_EQ(MatchRoute("DELETE", "/v1/snapshots/s1").id, RouteId::kDeleteSnapshot);
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/x/fork").outcome, Outcome::kMethodNotAllowed);
}

TEST(MatchRoute, NetworkRoutes) {
  EXPECT_EQ(MatchRoute("PUT", "/v1/sandboxes/x/network").id, RouteId::kSetNetwork);
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/x/egress").id, RouteId::kEgress);
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/egress").outcome, Outcome::kMethodNotAllowed);
}

TEST(MatchRoute, PortRoutesTakeAnyMethodAndTheRestOfThePath) {
  for (auto [method, path] : std::vector<std::pair<const char*, const char*>>{
           {"GET", "/v1/sandboxes/x/ports/8080"}, {"GET", "/v1/sandboxes/x/ports/8080/"},
           {"PATCH", "/v1/sandboxes/x/ports/8080/a/b/c"}, {"PROPFIND", "/v1/sandboxes/x/ports/8080/dav"},
           {"DELETE", "/v1/sandboxes/x/ports/1/items/3"}}) {
    const RouteMatch match = MatchRoute(method, path);
    EXPECT_EQ(match.outcome, Outcome::kMatched) << method << " " << path;
    EXPECT_EQ(match.id, RouteId::kPortProxy) << method << " " << path;
    EXPECT_TRUE(match.NeedsAuth());
  }
  const RouteMatch proxy = MatchRoute("GET", "/v1/sandboxes/x/ports/8080/a/b");
  EXPECT_EQ(proxy.Param("id"), "x");
  EXPECT_EQ(proxy.Param("port"), "8080");
  EXPECT_EQ(proxy.Param("path"), "a/b");

  const RouteMatch tcp = MatchRoute("GET", "/v1/sandboxes/x/tcp/5432");
  EXPECT_EQ(tcp.outcome, Outcome::kMatched);
  EXPECT_EQ(tcp.id, RouteId::kTcpForward);
  EXPECT_EQ(tcp.Param("port"), "5432");
  EXPECT_TRUE(tcp.NeedsAuth());
  EXPECT_EQ(MatchRoute("POST", "/v1/sandboxes/x/tcp/5432").outcome, Outcome::kMethodNotAllowed);
  EXPECT_EQ(MatchRoute("GET", "/v1/sandboxes/x/tcp/5432/more").outcome, Outcome::kNotFound);
}

TEST(PortProxyAppTarget, KeepsThePathAfterThePortAsEncodedAndTheQuery) {
  EXPECT_EQ(PortProxyAppTarget("/v1/sandboxes/x/ports/80"), "/");
  EXPECT_EQ(PortProxyAppTarget("/v1/sandboxes/x/ports/80/"), "/");
  EXPECT_EQ(PortProxyAppTarget("/v1/sandboxes/x/ports/80?a=1"), "/?a=1");
  EXPECT_EQ(PortProxyAppTarget("/v1/sandboxes/x/ports/80/a/b%2Fc?q=a+b&r=%20"), "/a/b%2Fc?q=a+b&r=%20");
  EXPECT_EQ(PortProxyAppTarget("/v1/sandboxes/x/ports/80//double"), "//double");
  EXPECT_EQ(PortProxyAppTarget("/v1/sandboxes/x/ports/80/p?next=/v1/x"), "/p?next=/v1/x");
}

TEST(MatchPreviewHost, SplitsPortAndIdUnderThePreviewDomain) {
  auto host = MatchPreviewHost("8000-abcdefghij0123456789.localhost:7420", "localhost:7420");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->port, "8000");
  EXPECT_EQ(host->sandbox_id, "abcdefghij0123456789");
  // Host names are case-insensitive: browsers may send either.
  host = MatchPreviewHost("3000-ABCdef.Preview.Example.COM", "preview.example.com");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->port, "3000");
  EXPECT_EQ(host->sandbox_id, "abcdef");
  // The first dash splits; the rest belongs to the id (validated later).
  host = MatchPreviewHost("80-a-b.localhost:7420", "localhost:7420");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->sandbox_id, "a-b");
  // A bad port is still a preview host (answered 404 by the proxy), not an API request.
  host = MatchPreviewHost("x-abc.localhost:7420", "localhost:7420");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->port, "x");
}

TEST(MatchPreviewHost, OtherHostsAreNotPreviewHosts) {
  EXPECT_FALSE(MatchPreviewHost("localhost:7420", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("127.0.0.1:7420", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("8000-abc.localhost:7421", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("8000-abc.evillocalhost:7420", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("8000abc.localhost:7420", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("-abc.localhost:7420", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("8000-.localhost:7420", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("", "localhost:7420"));
  EXPECT_FALSE(MatchPreviewHost("8000-abc.localhost:7420", ""));  // host routing off
}

TEST(MatchRoute, OnlyHealthzIsServedWithoutKey) {
  EXPECT_FALSE(MatchRoute("GET", "/healthz").NeedsAuth());
  EXPECT_TRUE(MatchRoute("GET", "/metrics").NeedsAuth());
  EXPECT_TRUE(MatchRoute("POST", "/healthz").NeedsAuth());
  EXPECT_TRUE(MatchRoute("GET", "/v1/sandboxes").NeedsAuth());
}

TEST(ParseTarget, SplitsPathAndDecodesQuery) {
  auto target = ParseTarget("/v1/sandboxes?state=running&metadata.owner=a%20b+c&flag&=x&");
  ASSERT_TRUE(target);
  EXPECT_EQ(target->path, "/v1/sandboxes");
  const QueryParams expected = {{"state", "running"}, {"metadata.owner", "a b c"}, {"flag", ""}, {"", "x"}};
  EXPECT_EQ(target->query, expected);
  auto plain = ParseTarget("/healthz");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->path, "/healthz");
  EXPECT_TRUE(plain->query.empty());
  EXPECT_FALSE(ParseTarget("http://example.com/healthz"));
  EXPECT_FALSE(ParseTarget("*"));
  EXPECT_FALSE(ParseTarget(""));
  EXPECT_FALSE(ParseTarget("/x?a=%G1"));
}

TEST(PercentDecode, HandlesEscapesAndPlus) {
  EXPECT_EQ(PercentDecode("a%41%2f+", false), "aA/+");
  EXPECT_EQ(PercentDecode("a+b", true), "a b");
  EXPECT_EQ(PercentDecode("%00", false), std::string("\0", 1));
  EXPECT_FALSE(PercentDecode("%", false));
  EXPECT_FALSE(PercentDecode("%4", false));
  EXPECT_FALSE(PercentDecode("%4g", false));
}

}  // namespace
}  // namespace bulkhead::api
