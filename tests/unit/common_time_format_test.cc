#include "common/time_format.h"

#include <gtest/gtest.h>

namespace bulkhead {
namespace {

TEST(TimeFormat, MillisRoundTripAndOlderForms) {
  EXPECT_EQ(Rfc3339Millis(int64_t{1714564800123}), "2024-05-01T12:00:00.123Z");
  EXPECT_EQ(Rfc3339Millis(int64_t{1714564800000}), "2024-05-01T12:00:00.000Z");
  EXPECT_EQ(ParseRfc3339Millis("2024-05-01T12:00:00.123Z"), 1714564800123);
  // Whole seconds (rows of older versions), more digits than milliseconds, offsets.
  EXPECT_EQ(ParseRfc3339Millis("2024-05-01T12:00:00Z"), 1714564800000);
  EXPECT_EQ(ParseRfc3339Millis("2024-05-01T12:00:00.1239Z"), 1714564800123);
  EXPECT_EQ(ParseRfc3339Millis("2024-05-01T12:00:00.5Z"), 1714564800500);
  EXPECT_EQ(ParseRfc3339Millis("2024-05-01T14:00:00.123000+02:00"), 1714564800123);
  EXPECT_FALSE(ParseRfc3339Millis("2024-05-01T12:00:00.Z").has_value());
  EXPECT_FALSE(ParseRfc3339Millis("2024-05-01T12:00:00").has_value());
  EXPECT_FALSE(ParseRfc3339Millis("").has_value());
}

}  // namespace
}  // namespace bulkhead
