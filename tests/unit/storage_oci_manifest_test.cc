// The registry's documents: indexes, manifests and configs of both the OCI and the Docker
// schema 2 formats read, the host's platform picked from an index, and every malformed or
// hostile field (digests, sizes, types, schema 1) refused before anything is downloaded.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "storage/oci_manifest.h"

namespace bulkhead::storage {
namespace {

using nlohmann::json;

const std::string kA = "sha256:" + std::string(64, 'a');
const std::string kB = "sha256:" + std::string(64, 'b');
const std::string kC = "sha256:" + std::string(64, 'c');

json Manifest(const std::string& type, const std::string& layer_type) {
  return {{"schemaVersion", 2},
          {"mediaType", type},
          {"config", {{"mediaType", media_type::kOciConfig}, {"digest", kA}, {"size", 100}}},
          {"layers", json::array({{{"mediaType", layer_type}, {"digest", kB}, {"size", 2000}},
                                  {{"mediaType", layer_type}, {"digest", kC}, {"size", 3000}}})}};
}

TEST(OciManifestTest, ReadsOciAndDockerManifestsWithTheirLayersBottomFirst) {
  for (auto [type, layer] : {std::pair{media_type::kOciManifest, media_type::kOciLayerGzip},
                             std::pair{media_type::kOciManifest, media_type::kOciLayerZstd},
                             std::pair{media_type::kOciManifest, media_type::kOciLayer},
                             std::pair{media_type::kDockerManifest, media_type::kDockerLayer}}) {
    const std::string body = Manifest(type, layer).dump();
    auto media = ManifestMediaType(body, "application/json");
    ASSERT_TRUE(media.ok()) << media.error().message;
    EXPECT_EQ(*media, type);
    auto manifest = ParseImageManifest(body, *media);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    EXPECT_EQ(manifest->config.digest, kA);
    ASSERT_EQ(manifest->layers.size(), 2u);
    EXPECT_EQ(manifest->layers[0].digest, kB);
    EXPECT_EQ(manifest->layers[1].size, 3000u);
  }
}

TEST(OciManifestTest, TheTypeComesFromTheBodyThenTheHeaderAndSchemaOneIsRefusedByName) {
  json body = Manifest(media_type::kOciManifest, media_type::kOciLayerGzip);
  body.erase("mediaType");
  EXPECT_EQ(*ManifestMediaType(body.dump(), std::string(media_type::kDockerManifest) + "; charset=utf-8"),
            media_type::kDockerManifest);
  EXPECT_EQ(*ManifestMediaType(body.dump(), ""), media_type::kOciManifest) << "OCI lets mediaType out";
  auto v1 = ManifestMediaType(json{{"schemaVersion", 1}, {"fsLayers", json::array()}}.dump(), "application/json");
  ASSERT_FALSE(v1.ok());
  EXPECT_NE(v1.error().message.find("schema 1"), std::string::npos) << v1.error().message;
  EXPECT_FALSE(ManifestMediaType("[1,2]", "").ok());
  EXPECT_FALSE(ManifestMediaType("{not json", "").ok());
  EXPECT_FALSE(ManifestMediaType(std::string(kMaxManifestBytes + 1, ' '), "").ok());
}

TEST(OciManifestTest, RefusesBadDigestsSizesAndLayerTypes) {
  auto refused = [](json manifest, const std::string& why) {
    auto parsed = ParseImageManifest(manifest.dump(), media_type::kOciManifest);
    EXPECT_FALSE(parsed.ok()) << why;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.error().code, ErrorCode::kInvalid) << why;
    }
  };
  json m = Manifest(media_type::kOciManifest, media_type::kOciLayerGzip);
  json bad = m;
  bad["layers"][0]["digest"] = "sha256:../../etc/passwd";
  refused(bad, "a digest that is a path");
  bad = m;
  bad["layers"][0]["digest"] = "sha512:" + std::string(128, 'a');
  refused(bad, "not sha256");
  bad = m;
  bad["layers"][0]["size"] = -1;
  refused(bad, "a negative size");
  bad = m;
  bad["layers"][0]["size"] = "12";
  refused(bad, "a size that is a string");
  bad = m;
  bad["layers"][0]["size"] = uint64_t{1} << 50;
  refused(bad, "a petabyte layer");
  bad = m;
  bad["config"]["size"] = 64 << 20;
  refused(bad, "a config past the manifest cap");
  bad = m;
  bad["layers"][0]["mediaType"] = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
  refused(bad, "a foreign layer");
  bad = m;
  bad["layers"][0]["mediaType"] = "application/x-sh";
  refused(bad, "not a layer");
  bad = m;
  bad["schemaVersion"] = "2";
  refused(bad, "schemaVersion as a string");
  bad = m;
  bad.erase("config");
  refused(bad, "no config");
}

TEST(OciManifestTest, PicksTheWantedPlatformFromAnIndexNotTheFirstEntry) {
  json index = {{"schemaVersion", 2},
                {"mediaType", media_type::kOciIndex},
                {"manifests",
                 json::array({{{"mediaType", media_type::kOciManifest}, {"digest", kA}, {"size", 10},
                               {"platform", {{"os", "linux"}, {"architecture", "arm64"}, {"variant", "v8"}}}},
                              {{"mediaType", media_type::kOciManifest}, {"digest", kB}, {"size", 10},
                               {"platform", {{"os", "unknown"}, {"architecture", "unknown"}}}},
                              {{"mediaType", media_type::kOciManifest}, {"digest", kC}, {"size", 10},
                               {"platform", {{"os", "linux"}, {"architecture", "amd64"}}}}})}};
  EXPECT_TRUE(IsIndexType(*ManifestMediaType(index.dump(), "")));
  auto parsed = ParseImageIndex(index.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(PickPlatform(*parsed, {"linux", "amd64", ""})->digest, kC);
  EXPECT_EQ(PickPlatform(*parsed, {"linux", "arm64", ""})->digest, kA);
  auto missing = PickPlatform(*parsed, {"linux", "s390x", ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("linux/arm64/v8"), std::string::npos) << missing.error().message;
  EXPECT_EQ(missing.error().message.find("unknown"), std::string::npos) << "attestations are not platforms";
  EXPECT_EQ(HostPlatform().os, "linux");
}

TEST(OciManifestTest, ReadsWhatTheConfigSaysToRunWith) {
  json config = {{"architecture", "amd64"},
                 {"os", "linux"},
                 {"config",
                  {{"Env", {"PATH=/usr/bin", "LANG=C.UTF-8"}},
                   {"WorkingDir", "/app"},
                   {"User", "1000:1000"},
                   {"Entrypoint", {"/bin/app"}},
                   {"Cmd", {"--serve"}},
                   {"ExposedPorts", {{"8080/tcp", json::object()}}},
                   {"Labels", {{"team", "py"}}}}},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", {kA, kB}}}}};
  auto parsed = ParseImageConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->env, (std::vector<std::string>{"PATH=/usr/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(parsed->working_dir, "/app");
  EXPECT_EQ(parsed->user, "1000:1000");
  EXPECT_EQ(parsed->entrypoint, std::vector<std::string>{"/bin/app"});
  EXPECT_EQ(parsed->cmd, std::vector<std::string>{"--serve"});
  EXPECT_EQ(parsed->exposed_ports, std::vector<std::string>{"8080/tcp"});
  EXPECT_EQ(parsed->labels.at("team"), "py");
  EXPECT_EQ(parsed->diff_ids.size(), 2u);

  // Fields of the wrong type are left out, never thrown on.
  json odd = {{"config", {{"Env", "PATH=/x"}, {"WorkingDir", 7}, {"Cmd", {1, "x"}}}}};
  auto lenient = ParseImageConfig(odd.dump());
  ASSERT_TRUE(lenient.ok());
  EXPECT_TRUE(lenient->env.empty());
  EXPECT_EQ(lenient->cmd, std::vector<std::string>{"x"});
  json bad_ids = {{"rootfs", {{"diff_ids", {"md5:abc"}}}}};
  EXPECT_FALSE(ParseImageConfig(bad_ids.dump()).ok());
}

}  // namespace
}  // namespace bulkhead::storage
