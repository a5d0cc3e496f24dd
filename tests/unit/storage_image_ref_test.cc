// Image references: the parts of what users name (registry, repository, tag, digest), with the
// distribution spec's character classes and lengths, and every hostile or malformed form refused.
#include <gtest/gtest.h>

#include <string>

#include "storage/image_ref.h"

namespace bulkhead::storage {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

ImageRef Parsed(const std::string& text, const std::string& default_registry = "mirror.test") {
  auto ref = ParseImageRef(text, default_registry);
  EXPECT_TRUE(ref.ok()) << text << ": " << (ref.ok() ? "" : ref.error().message);
  return ref.ok() ? *ref : ImageRef{};
}

TEST(ImageRefTest, ARegistryIsTheFirstComponentWhereItHasADotAColonOrIsLocalhost) {
  ImageRef ref = Parsed("registry.example/team/py:3.12");
  EXPECT_EQ(ref.registry, "registry.example");
  EXPECT_EQ(ref.repository, "team/py");
  EXPECT_EQ(ref.tag, "3.12");
  EXPECT_EQ(ref.Reference(), "3.12");
  EXPECT_EQ(ref.ToString(), "registry.example/team/py:3.12");

  ref = Parsed("127.0.0.1:5000/a/b/c");
  EXPECT_EQ(ref.registry, "127.0.0.1:5000");
  EXPECT_EQ(ref.repository, "a/b/c");
  EXPECT_EQ(ref.tag, "latest") << "no tag and no digest: latest";

  ref = Parsed("localhost/x");
  EXPECT_EQ(ref.registry, "localhost");
  EXPECT_EQ(ref.repository, "x");

  ref = Parsed("[::1]:5000/x:t");
  EXPECT_EQ(ref.registry, "[::1]:5000");
  EXPECT_EQ(ref.tag, "t");
}

TEST(ImageRefTest, OtherNamesAreOnTheDefaultRegistryWithLibraryBeforeASingleComponent) {
  ImageRef ref = Parsed("python:3.12");
  EXPECT_EQ(ref.registry, "mirror.test");
  EXPECT_EQ(ref.repository, "library/python");
  EXPECT_EQ(ref.tag, "3.12");
  ref = Parsed("team/py");
  EXPECT_EQ(ref.registry, "mirror.test");
  EXPECT_EQ(ref.repository, "team/py");

  auto refused = ParseImageRef("python:3.12", "");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalid);
  EXPECT_NE(refused.error().message.find("--default-registry"), std::string::npos) << refused.error().message;
}

TEST(ImageRefTest, ADigestPinsTheImageAndIsWhatTheManifestRequestNames) {
  ImageRef ref = Parsed("registry.example:443/a@" + kDigest);
  EXPECT_EQ(ref.registry, "registry.example:443");
  EXPECT_EQ(ref.tag, "");
  EXPECT_EQ(ref.digest, kDigest);
  EXPECT_EQ(ref.Reference(), kDigest);
  ref = Parsed("registry.example/a:v1@" + kDigest);
  EXPECT_EQ(ref.tag, "v1");
  EXPECT_EQ(ref.Reference(), kDigest);
  EXPECT_EQ(ref.ToString(), "registry.example/a:v1@" + kDigest);
}

TEST(ImageRefTest, SeparatorsInAPathComponentFollowTheSpec) {
  for (const char* good : {"r.test/a.b", "r.test/a_b", "r.test/a__b", "r.test/a---b", "r.test/0/9z"})
    Parsed(good);
  for (const char* bad : {"r.test/a..b", "r.test/a___b", "r.test/a.-b", "r.test/-a", "r.test/a-", "r.test/A",
                          "r.test/a b", "r.test/a%2fb"})
    EXPECT_FALSE(ParseImageRef(bad, "mirror.test").ok()) << bad;
}

TEST(ImageRefTest, MalformedAndHostileReferencesAreRefusedWithAReason) {
  const std::string long_name = "r.test/" + std::string(250, 'a');
  for (const std::string& bad :
       {std::string(""), std::string("r.test/"), std::string("/a"), std::string("r.test//a"), std::string("r.test/a/"),
        std::string("r.test/../etc"), std::string("r.test/a/./b"), std::string("a:b:c"), std::string("r.test/a:"),
        std::string("r.test/a:-t"), std::string("r.test/a:.t"), std::string("r.test/a:t/x"),
        std::string("r.test/a:") + std::string(129, 't'), std::string("r.test/a@sha256:abc"),
        std::string("r.test/a@md5:") + std::string(32, 'a'), std::string("r.test/a@sha256:") + std::string(64, 'A'),
        std::string("r.test/a@") + kDigest + "x", std::string("r.test:/a"), std::string("r.test:99999x/a"),
        std::string("-r.test/a"), std::string("r..test/a"), std::string("[zz]:1/a"), std::string("[::1/a"),
        std::string("r.test/a\n"), std::string("r.test/a?x"), std::string("r.test/a#x"), long_name,
        std::string(4096, 'a')}) {
    auto ref = ParseImageRef(bad, "mirror.test");
    EXPECT_FALSE(ref.ok()) << bad << " gave " << (ref.ok() ? ref->ToString() : "");
    if (!ref.ok()) {
      EXPECT_EQ(ref.error().code, ErrorCode::kInvalid) << bad;
    }
  }
}

TEST(ImageRefTest, LocalImageNamesAreNoRegistryReferences) {
  EXPECT_FALSE(IsRegistryReference("host"));
  EXPECT_FALSE(IsRegistryReference("my-rootfs_1.0"));
  EXPECT_TRUE(IsRegistryReference("python:3.12"));
  EXPECT_TRUE(IsRegistryReference("team/py"));
  EXPECT_TRUE(IsRegistryReference("py@" + kDigest));
}

}  // namespace
}  // namespace bulkhead::storage
