#include "service/api_key.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace bulkhead::api {
namespace {

class ApiKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/bulkhead-api-key-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ApiKeyTest, FirstStartWritesA64HexDigitKeyWithMode0600) {
  auto key = LoadOrCreateApiKey(dir_, "");
  ASSERT_TRUE(key.ok()) << key.error().message;
  EXPECT_EQ(key->size(), 64u);
  EXPECT_EQ(key->find_first_not_of("0123456789abcdef"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/api-key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Nothing but the key file is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

TEST_F(ApiKeyTest, LaterStartsReadTheSameKey) {
  auto first = LoadOrCreateApiKey(dir_, "");
  auto second = LoadOrCreateApiKey(dir_, "");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
}

TEST_F(ApiKeyTest, KeysDifferBetweenStateDirs) {
  auto first = LoadOrCreateApiKey(dir_, "");
  std::filesystem::remove(dir_ + "/api-key");
  auto second = LoadOrCreateApiKey(dir_, "");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);
}

TEST_F(ApiKeyTest, ConfiguredKeyWinsAndWritesNothing) {
  auto key = LoadOrCreateApiKey(dir_, "from-env");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*key, "from-env");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/api-key"));
}

TEST_F(ApiKeyTest, ExistingKeyFileIsTrimmed) {
  std::ofstream(dir_ + "/api-key") << "  my-key\n";
  auto key = LoadOrCreateApiKey(dir_, "");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*key, "my-key");
}

TEST_F(ApiKeyTest, EmptyKeyFileIsAnErrorNotAnOpenDoor) {
  std::ofstream(dir_ + "/api-key") << "\n";
  EXPECT_FALSE(LoadOrCreateApiKey(dir_, "").ok());
}

TEST_F(ApiKeyTest, ConcurrentFirstStartsAgreeOnOneKey) {
  std::vector<std::string> keys(8);
  std::vector<std::thread> threads;
  for (auto& key : keys) {
    threads.emplace_back([&] {
      auto result = LoadOrCreateApiKey(dir_, "");
      key = result.ok() ? *result : "error: " + result.error().message;
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& key : keys) EXPECT_EQ(key, keys[0]);
  EXPECT_EQ(keys[0].size(), 64u);
}

TEST(IsAuthorized, AcceptsOnlyBearerWithTheExactKey) {
  EXPECT_TRUE(IsAuthorized("Bearer secret", "secret"));
  EXPECT_TRUE(IsAuthorized("bearer secret", "secret"));
  EXPECT_TRUE(IsAuthorized("Bearer   secret ", "secret"));
  EXPECT_FALSE(IsAuthorized("", "secret"));
  EXPECT_FALSE(IsAuthorized("secret", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearer", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearer ", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearersecret", "secret"));
  EXPECT_FALSE(IsAuthorized("Basic secret", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearer secre", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearer secrets", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearer SECRET", "secret"));
  EXPECT_FALSE(IsAuthorized("Bearer ", ""));  // an empty key never authorizes
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", std::string("abc\0", 4)));
}

}  // namespace
}  // namespace bulkhead::api
