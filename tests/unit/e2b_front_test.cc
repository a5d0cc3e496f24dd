// The pure pieces of the E2B front: request translation (NewSandboxV2 and network rules onto
// bulkhead's create body), the list's metadata filter, tokens and file signatures, Connect
// envelopes and headers, and the default address and domain. The front itself is tested against real
// daemons in tests/integration/test_e2b_*.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "e2b/connect_rpc.h"
#include "e2b/control_plane.h"
#include "e2b/envd_auth.h"
#include "e2b/front.h"

namespace bulkhead::e2b {
namespace {

using json = nlohmann::json;

TEST(E2bCreate, BaseTemplateIsTheHostImageAsUserWithOpenEgressAndE2bsTimeout) {
  Result<json> body = BulkheadCreateBody(json{{"templateID", "base"}}, false);
  ASSERT_TRUE(body.ok()) << body.error().message;
  EXPECT_EQ((*body)["image"], "host");
  EXPECT_EQ((*body)["user"], "user");
  EXPECT_EQ((*body)["workdir"], "/home/user");
  EXPECT_EQ((*body)["sudo_users"], json::array({"user"}));  // E2B's base template: password-less sudo
  EXPECT_EQ((*body)["timeout_s"], 300);
  EXPECT_EQ((*body)["network"]["mode"], "open");
  EXPECT_FALSE(body->contains("from_snapshot"));
}

TEST(E2bCreate, CarriesTimeoutAutoPauseEnvAndMetadata) {
  const json e2b = {{"templateID", "base"}, {"timeout", 120}, {"autoPause", true},
                    {"envVars", {{"A", "1"}}}, {"metadata", {{"k", "v w"}}}};
  Result<json> body = BulkheadCreateBody(e2b, false);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["timeout_s"], 120);
  EXPECT_EQ((*body)["on_timeout"], "pause");
  EXPECT_EQ((*body)["env"], json({{"A", "1"}}));
  EXPECT_EQ((*body)["metadata"], json({{"k", "v w"}}));
}

TEST(E2bCreate, AnAutoPauseWithoutMemoryIsAStop) {
  Result<json> body = BulkheadCreateBody(json{{"autoPause", true}, {"autoPauseMemory", false}}, false);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["on_timeout"], "stop");
  body = BulkheadCreateBody(json{{"autoPause", true}, {"autoPauseMemory", true}}, false);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["on_timeout"], "pause");
  body = BulkheadCreateBody(json{{"autoPause", false}, {"autoPauseMemory", false}}, false);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["on_timeout"], "kill");
  EXPECT_FALSE(BulkheadCreateBody(json{{"autoPause", true}, {"autoPauseMemory", "no"}}, false).ok());
}

TEST(E2bCreate, ASnapshotTemplateStartsFromTheSnapshotAndAnImageKeepsItsDefaults) {
  Result<json> snapshot = BulkheadCreateBody(json{{"templateID", "snap_abc"}}, true);
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ((*snapshot)["from_snapshot"], "snap_abc");
  EXPECT_FALSE(snapshot->contains("image"));
  Result<json> image = BulkheadCreateBody(json{{"templateID", "python"}}, false);
  ASSERT_TRUE(image.ok());
  EXPECT_EQ((*image)["image"], "python");
  EXPECT_FALSE(image->contains("user"));  // the image's users are unknown: bulkhead's default
}

TEST(E2bCreate, RefusesFieldsOfTheWrongKind) {
  EXPECT_FALSE(BulkheadCreateBody(json{{"timeout", "60"}}, false).ok());
  EXPECT_FALSE(BulkheadCreateBody(json{{"timeout", -1}}, false).ok());
  EXPECT_FALSE(BulkheadCreateBody(json{{"autoPause", 1}}, false).ok());
  EXPECT_FALSE(BulkheadCreateBody(json{{"envVars", json::array()}}, false).ok());
  EXPECT_FALSE(BulkheadCreateBody(json{{"network", "open"}}, false).ok());
  EXPECT_FALSE(BulkheadCreateBody(json{{"allow_internet_access", "no"}}, false).ok());
}

TEST(E2bCreate, AllowPublicTrafficFalseAsksForAPrivatePreview) {
  Result<json> closed = BulkheadCreateBody(json{{"network", {{"allowPublicTraffic", false}}}}, false);
  ASSERT_TRUE(closed.ok()) << closed.error().message;
  EXPECT_EQ((*closed)["preview"], json({{"public", false}}));
  EXPECT_EQ((*closed)["network"]["mode"], "open");  // egress is another matter
  Result<json> open = BulkheadCreateBody(json{{"network", {{"allowPublicTraffic", true}}}}, false);
  ASSERT_TRUE(open.ok());
  EXPECT_EQ((*open)["preview"], json({{"public", true}}));
  for (const json& e2b : {json::object(), json{{"network", json::object()}},
                          json{{"network", {{"allowPublicTraffic", nullptr}}}}}) {
    Result<json> body = BulkheadCreateBody(e2b, false);
    ASSERT_TRUE(body.ok());
    EXPECT_FALSE(body->contains("preview")) << e2b;  // bulkhead's default: public, as E2B's
  }
  Result<json> wrong = BulkheadCreateBody(json{{"network", {{"allowPublicTraffic", "false"}}}}, false);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("allowPublicTraffic"), std::string::npos);
}

TEST(E2bNetwork, MapsE2bRulesOntoModes) {
  auto mode = [](const json& network, const json& internet) {
    Result<json> out = BulkheadNetwork(network.is_null() ? nullptr : &network, internet.is_null() ? nullptr : &internet);
    if (!out.ok()) return "error: " + out.error().message;
    std::string text = (*out)["mode"].get<std::string>() + " " + (*out)["allow"].dump();
    return (*out)["deny"].empty() ? text : text + " deny " + (*out)["deny"].dump();
  };
  EXPECT_EQ(mode(nullptr, nullptr), "open []");
  EXPECT_EQ(mode(nullptr, false), "none []");
  EXPECT_EQ(mode(nullptr, true), "open []");
  EXPECT_EQ(mode(json{{"denyOut", {"0.0.0.0/0"}}}, nullptr), "none []");
  EXPECT_EQ(mode(json{{"denyOut", {"0.0.0.0/0"}}, {"allowOut", {"example.com", "10.0.0.0/8"}}}, nullptr),
            "allowlist [\"example.com\",\"10.0.0.0/8\"]");
  // With everything denied, the other deny entries deny nothing more: allowOut wins over them.
  EXPECT_EQ(mode(json{{"denyOut", {"198.51.100.7", "0.0.0.0/0"}}, {"allowOut", {"198.51.100.0/24"}}}, nullptr),
            "allowlist [\"198.51.100.0/24\"]");
  EXPECT_EQ(mode(json{{"allowOut", {"198.51.100.7"}}}, false), "allowlist [\"198.51.100.7\"]");
}

TEST(E2bNetwork, DenyOutWithoutAllTrafficLeavesTheRestOpen) {
  auto mode = [](const json& network) {
    Result<json> out = BulkheadNetwork(&network, nullptr);
    if (!out.ok()) return "error: " + out.error().message;
    return (*out)["mode"].get<std::string>() + " " + (*out)["allow"].dump() + " deny " + (*out)["deny"].dump();
  };
  EXPECT_EQ(mode(json{{"denyOut", {"8.8.8.8", "2001:db8::/32"}}}), "open [] deny [\"8.8.8.8\",\"2001:db8::/32\"]");
  // Go's ParseCIDR clears host bits: so does E2B, so does bulkhead here.
  EXPECT_EQ(mode(json{{"denyOut", {"10.0.0.1/8"}}}), "open [] deny [\"10.0.0.0/8\"]");
  // allowOut wins over denyOut: what it names is taken out of the deny list.
  EXPECT_EQ(mode(json{{"denyOut", {"198.51.100.0/24", "203.0.113.9"}}, {"allowOut", {"198.51.100.10", "203.0.113.9"}}}),
            "open [] deny [\"198.51.100.0/29\",\"198.51.100.8/31\",\"198.51.100.11/32\",\"198.51.100.12/30\","
            "\"198.51.100.16/28\",\"198.51.100.32/27\",\"198.51.100.64/26\",\"198.51.100.128/25\"]");
  // An allowOut address nothing denies changes nothing.
  EXPECT_EQ(mode(json{{"allowOut", {"198.51.100.10"}}}), "open [] deny []");
}

TEST(E2bNetwork, RefusesWhatE2bRefusesInItsWords) {
  auto error = [](const json& network, const json& internet) {
    Result<json> out = BulkheadNetwork(&network, internet.is_null() ? nullptr : &internet);
    EXPECT_FALSE(out.ok()) << network << " gave " << (out.ok() ? out->dump() : "");
    if (out.ok()) return std::string();
    EXPECT_EQ(out.error().code, ErrorCode::kBadRequest) << network;
    return out.error().message;
  };
  const std::string domains =
      "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other "
      "traffic.";
  EXPECT_EQ(error(json{{"allowOut", {"example.com"}}}, nullptr), domains);
  EXPECT_EQ(error(json{{"allowOut", {"example.com"}}, {"denyOut", {"8.8.8.8"}}}, nullptr), domains);
  EXPECT_EQ(error(json{{"allowOut", {"example.com"}}}, false), domains);  // E2B checks denyOut itself
  for (const char* bad : {"example.com", "::/0", "0.0.0.0", "0.0.0.0/8", "::", "10.0.0.0/33", "[2001:db8::1]", ""}) {
    EXPECT_EQ(error(json{{"denyOut", {bad}}}, nullptr), std::string("invalid denied CIDR ") + bad);
  }
  EXPECT_EQ(error(json{{"allowOut", {"0.0.0.0"}}, {"denyOut", {"0.0.0.0/0"}}}, nullptr),
            "invalid allowed address 0.0.0.0");
  EXPECT_EQ(error(json{{"allowOut", {1}}}, nullptr), "network.allowOut must be an array of strings");
  EXPECT_EQ(error(json{{"denyOut", "8.8.8.8"}}, nullptr), "network.denyOut must be an array of strings");
}

TEST(E2bList, DecodesTheSdksDoublyEncodedMetadataFilter) {
  // {"k": "v w", "a&b": "c=d"} as both SDKs send it, after the query's own decoding.
  Result<std::map<std::string, std::string>> parsed = ParseMetadataFilter("k=v%2520w&a%2526b=c%253Dd");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, (std::map<std::string, std::string>{{"k", "v w"}, {"a&b", "c=d"}}));
  EXPECT_TRUE(ParseMetadataFilter("").ok());
  EXPECT_FALSE(ParseMetadataFilter("novalue").ok());
  EXPECT_FALSE(ParseMetadataFilter("k=%zz").ok());
  EXPECT_FALSE(ParseMetadataFilter("=v").ok());
}

// Expected values computed independently (Python's hmac, hashlib and base64).
TEST(E2bAuth, TokenIsAnHmacOfTheSandboxIdUnderTheKey) {
  EXPECT_EQ(EnvdAccessToken("e2b_key", "sbx1"), "321b9f97608862332eef5279d1d187a11cc530ac7e5f8388058ccd134ef075a7");
  EXPECT_NE(EnvdAccessToken("e2b_key", "sbx2"), EnvdAccessToken("e2b_key", "sbx1"));
}

TEST(E2bAuth, FileSignaturesMatchTheSdks) {
  EXPECT_EQ(FileSignature("/home/user/x.txt", "write", "user", "tok123", 0),
            "v1_AfGabJ89jfEeyKP+PpXWclPwKiF66CSwvBEPTd9WuZU");
  EXPECT_EQ(FileSignature("/a b.txt", "read", "", "tok123", 1800000000),
            "v1_AGM09lC3CrStFgfFJ0YmYgA2QkoliTBSod9DokYy23I");
}

TEST(E2bAuth, BasicAuthNamesTheUser) {
  Result<std::optional<std::string>> root = BasicAuthUser("Basic cm9vdDo=");
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(**root, "root");
  Result<std::optional<std::string>> none = BasicAuthUser("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(BasicAuthUser("Bearer x").ok());
  EXPECT_FALSE(BasicAuthUser("Basic !!!").ok());
  EXPECT_FALSE(BasicAuthUser("Basic Om5vdXNlcg==").ok());  // ":nouser"
}

TEST(E2bConnect, EnvelopesRoundTripAndMalformedOnesAreRefused) {
  const std::string envelope = Envelope(kEnvelopeMessage, R"({"path":"/tmp"})");
  ASSERT_EQ(envelope.size(), 5u + 15u);
  EXPECT_EQ(envelope.substr(0, 5), std::string("\0\0\0\0\x0f", 5));
  Result<json> parsed = ParseRequestEnvelope(envelope);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)["path"], "/tmp");
  EXPECT_FALSE(ParseRequestEnvelope("").ok());
  EXPECT_FALSE(ParseRequestEnvelope(envelope.substr(0, 10)).ok());                  // cut short
  EXPECT_FALSE(ParseRequestEnvelope(envelope + "x").ok());                          // trailing bytes
  EXPECT_FALSE(ParseRequestEnvelope(Envelope(kEnvelopeCompressed, "{}")).ok());
  EXPECT_FALSE(ParseRequestEnvelope(Envelope(kEnvelopeEndStream, "{}")).ok());
  EXPECT_FALSE(ParseRequestEnvelope(Envelope(kEnvelopeMessage, "[1]")).ok());
  EXPECT_FALSE(ParseRequestEnvelope(Envelope(kEnvelopeMessage, "{")).ok());
  // A length far beyond the body.
  EXPECT_FALSE(ParseRequestEnvelope(std::string("\0\xff\xff\xff\xff{}", 7)).ok());
}

TEST(E2bConnect, ErrorCodesMapOntoConnectsStatuses) {
  EXPECT_EQ(RpcHttpStatus("not_found"), 404);
  EXPECT_EQ(RpcHttpStatus("deadline_exceeded"), 504);
  EXPECT_EQ(RpcHttpStatus("unavailable"), 503);
  EXPECT_EQ(RpcHttpStatus("bogus"), 500);
  EXPECT_EQ(ToRpcError(MakeError(ErrorCode::kNotFound, "x")).code, "not_found");
  EXPECT_EQ(ToRpcError(MakeError(ErrorCode::kConflict, "x", "exists")).code, "already_exists");
  EXPECT_EQ(ToRpcError(MakeError(ErrorCode::kInvalid, "x")).code, "invalid_argument");
  EXPECT_EQ(ToRpcError(MakeError(ErrorCode::kForbidden, "x")).code, "permission_denied");
}

TEST(E2bConnect, ReadsTimeoutAndKeepaliveHeaders) {
  api::RequestHeader request;
  Result<std::optional<std::chrono::milliseconds>> none = ConnectTimeout(request);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(KeepaliveInterval(request).has_value());
  request.set("Connect-Timeout-Ms", "60000");
  request.set("Keepalive-Ping-Interval", "50");
  EXPECT_EQ(**ConnectTimeout(request), std::chrono::milliseconds(60000));
  EXPECT_EQ(*KeepaliveInterval(request), std::chrono::seconds(50));
  request.set("Connect-Timeout-Ms", "-1");
  EXPECT_FALSE(ConnectTimeout(request).ok());
  request.set("Connect-Timeout-Ms", "12345678901");
  EXPECT_FALSE(ConnectTimeout(request).ok());
  request.set("Keepalive-Ping-Interval", "0");
  EXPECT_FALSE(KeepaliveInterval(request).has_value());
}

TEST(E2bListen, DefaultsToTheApisHostAndTheNextPort) {
  EXPECT_EQ(cli::DefaultE2bListen("127.0.0.1:7420"), "127.0.0.1:7421");
  EXPECT_EQ(cli::DefaultE2bListen("[::1]:8000"), "[::1]:8001");
  EXPECT_EQ(cli::DefaultE2bListen("127.0.0.1:0"), "127.0.0.1:0");
  EXPECT_EQ(cli::DefaultE2bListen(""), "");
  EXPECT_EQ(cli::DefaultE2bListen("127.0.0.1:65535"), "");
}

TEST(E2bDomain, IsTheFrontsAddressWithLocalhostForLoopbackAndWildcardHosts) {
  EXPECT_EQ(DefaultE2bDomain("127.0.0.1:7421", 7421), "localhost:7421");
  EXPECT_EQ(DefaultE2bDomain("127.0.0.1:0", 40123), "localhost:40123");  // the bound port
  EXPECT_EQ(DefaultE2bDomain("localhost:7421", 7421), "localhost:7421");
  EXPECT_EQ(DefaultE2bDomain("[::1]:7421", 7421), "localhost:7421");
  EXPECT_EQ(DefaultE2bDomain("0.0.0.0:7421", 7421), "localhost:7421");
  EXPECT_EQ(DefaultE2bDomain("[::]:7421", 7421), "localhost:7421");
  EXPECT_EQ(DefaultE2bDomain("sandboxes.example.test:7421", 7421), "sandboxes.example.test:7421");
  EXPECT_EQ(DefaultE2bDomain("192.0.2.7:7421", 7421), "192.0.2.7:7421");
}

}  // namespace
}  // namespace bulkhead::e2b
