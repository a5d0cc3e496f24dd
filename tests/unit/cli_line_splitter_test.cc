#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/line_splitter.h"

namespace bulkhead::cli {
namespace {

struct Collector {
  std::vector<std::string> lines;
  LineHandler handler() {
    return [this](std::string_view line) -> Status {
      lines.emplace_back(line);
      return {};
    };
  }
};

TEST(CliLineSplitter, JoinsLinesSplitAcrossPieces) {
  LineSplitter splitter;
  Collector got;
  ASSERT_TRUE(splitter.Feed("{\"a\":", got.handler()).ok());
  EXPECT_TRUE(got.lines.empty());
  ASSERT_TRUE(splitter.Feed("1}\n{\"b\"", got.handler()).ok());
  ASSERT_EQ(got.lines.size(), 1u);
  ASSERT_TRUE(splitter.Feed(":2}\n{\"c\":3}\n", got.handler()).ok());
  ASSERT_TRUE(splitter.Finish(got.handler()).ok());
  EXPECT_EQ(got.lines, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"}));
}

TEST(CliLineSplitter, DeliversEachLineAsSoonAsItsNewlineArrives) {
  LineSplitter splitter;
  Collector got;
  ASSERT_TRUE(splitter.Feed("one\ntw", got.handler()).ok());
  EXPECT_EQ(got.lines, std::vector<std::string>{"one"});
}

TEST(CliLineSplitter, StripsCarriageReturnsAndSkipsBlankLines) {
  LineSplitter splitter;
  Collector got;
  ASSERT_TRUE(splitter.Feed("a\r\n\n\r\nb\n", got.handler()).ok());
  EXPECT_EQ(got.lines, (std::vector<std::string>{"a", "b"}));
}

TEST(CliLineSplitter, FinishDeliversALastLineWithoutNewline) {
  LineSplitter splitter;
  Collector got;
  ASSERT_TRUE(splitter.Feed("a\nlast", got.handler()).ok());
  ASSERT_TRUE(splitter.Finish(got.handler()).ok());
  EXPECT_EQ(got.lines, (std::vector<std::string>{"a", "last"}));
}

TEST(CliLineSplitter, RefusesALineLongerThanTheLimit) {
  LineSplitter splitter(/*max_line_bytes=*/8);
  Collector got;
  ASSERT_TRUE(splitter.Feed("12345", got.handler()).ok());
  Status status = splitter.Feed("67890", got.handler());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, "line_too_long");
}

TEST(CliLineSplitter, AHandlerErrorStopsTheStream) {
  LineSplitter splitter;
  int calls = 0;
  Status status = splitter.Feed("a\nb\nc\n", [&calls](std::string_view) -> Status {
    ++calls;
    return MakeError(ErrorCode::kInternal, "stop", "stop");
  });
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace bulkhead::cli
