#include <gtest/gtest.h>

#include "cli/base64.h"

namespace bulkhead::cli {
namespace {

TEST(CliBase64, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
}

TEST(CliBase64, RoundTripsEveryByteValueAtEveryLength) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (size_t length = 0; length <= bytes.size(); ++length) {
    std::string input = bytes.substr(bytes.size() - length);
    auto decoded = Base64Decode(Base64Encode(input));
    ASSERT_TRUE(decoded.has_value()) << length;
    EXPECT_EQ(*decoded, input) << length;
  }
}

TEST(CliBase64, DecodeSkipsLineBreaks) { EXPECT_EQ(Base64Decode("Zm9v\nYmFy\r\n"), "foobar"); }

TEST(CliBase64, DecodeRejectsMalformedInput) {
  EXPECT_FALSE(Base64Decode("Z").has_value());         // a lone sextet
  EXPECT_FALSE(Base64Decode("Zg=").has_value());       // short padding
  EXPECT_FALSE(Base64Decode("Zg").has_value());        // missing padding
  EXPECT_FALSE(Base64Decode("Zm9v!").has_value());     // outside the alphabet
  EXPECT_FALSE(Base64Decode("Zg==Zm9v").has_value());  // data after padding
  EXPECT_FALSE(Base64Decode("====").has_value());
}

}  // namespace
}  // namespace bulkhead::cli
