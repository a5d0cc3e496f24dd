#include "common/percent_encode.h"

#include <gtest/gtest.h>

#include "http/request_target.h"

namespace bulkhead {
namespace {

TEST(PercentEncodeTest, KeepsOnlyUnreservedCharacters) {
  EXPECT_EQ(PercentEncode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(PercentEncode("a/b c?d&e=f"), "a%2Fb%20c%3Fd%26e%3Df");
  EXPECT_EQ(PercentEncode("../x"), "..%2Fx");
  EXPECT_EQ(PercentEncode("repository:team/py:pull,push"), "repository%3Ateam%2Fpy%3Apull%2Cpush");
  EXPECT_EQ(PercentEncode("a+b#%"), "a%2Bb%23%25");
  EXPECT_EQ(PercentEncode("\xc3\xa9\n"), "%C3%A9%0A");
  EXPECT_EQ(PercentEncode(""), "");
}

TEST(PercentEncodeTest, PercentDecodeUndoesIt) {
  std::string every_byte;
  for (int c = 0; c < 256; c++) every_byte += static_cast<char>(c);
  EXPECT_EQ(api::PercentDecode(PercentEncode(every_byte), /*plus_is_space=*/true), every_byte);
}

}  // namespace
}  // namespace bulkhead
