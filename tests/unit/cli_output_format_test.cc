#include <gtest/gtest.h>

#include "cli/output_format.h"

namespace bulkhead::cli {
namespace {

TEST(CliOutputFormat, TableAlignsColumnsAndLeavesNoTrailingSpaces) {
  std::string table = FormatTable({{"ID", "STATE"}, {"sb-1234", "running"}, {"x", "paused"}});
  EXPECT_EQ(table,
            "ID        STATE\n"
            "sb-1234   running\n"
            "x         paused\n");
}

TEST(CliOutputFormat, ParsesRfc3339InUtcAndWithOffsets) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00Z"), 1714564800);
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00.123456Z"), 1714564800);
  EXPECT_EQ(ParseRfc3339("2024-05-01T14:00:00+02:00"), 1714564800);
  EXPECT_EQ(ParseRfc3339("2024-05-01T07:30:00-04:30"), 1714564800);
  EXPECT_FALSE(ParseRfc3339("2024-05-01").has_value());
  EXPECT_FALSE(ParseRfc3339("2024-05-01T12:00:00").has_value());  // no zone
  EXPECT_FALSE(ParseRfc3339("2024-05-01T12:00:00Zjunk").has_value());
  EXPECT_FALSE(ParseRfc3339("yesterday at noon, UTC").has_value());
}

TEST(CliOutputFormat, DescribesAgesAndExpiries) {
  int64_t now = 1714564800;  // 2024-05-01T12:00:00Z
  EXPECT_EQ(DescribeCreated("2024-05-01T11:59:18Z", now), "42s ago");
  EXPECT_EQ(DescribeCreated("2024-05-01T11:55:00Z", now), "5m ago");
  EXPECT_EQ(DescribeCreated("2024-04-28T12:00:00Z", now), "3d ago");
  EXPECT_EQ(DescribeCreated("", now), "-");
  EXPECT_EQ(DescribeCreated("garbage", now), "garbage");
  EXPECT_EQ(DescribeExpiry("2024-05-01T14:00:00Z", now), "in 2h");
  EXPECT_EQ(DescribeExpiry("2024-05-01T11:00:00Z", now), "expired");
  EXPECT_EQ(DescribeExpiry("", now), "never");
}

TEST(CliOutputFormat, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 30), "5.0 GiB");
}

}  // namespace
}  // namespace bulkhead::cli
