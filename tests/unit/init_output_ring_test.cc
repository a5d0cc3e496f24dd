// OutputRing: the output a background process keeps (src/init/output_ring.h).
#include "init/output_ring.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace bulkhead::init {
namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
const uint64_t kUnlimited[2] = {kNoLimit, kNoLimit};

struct Received {
  OutputStream stream;
  std::string data;
  bool operator==(const Received&) const = default;
};

// Everything a cursor gets now, in order, adjacent pieces of one stream joined.
std::vector<Received> Drain(const OutputRing& ring, OutputRing::Cursor& cursor, size_t max_bytes = 1 << 20,
                            const uint64_t* limit = kUnlimited) {
  std::vector<Received> got;
  while (auto piece = ring.Read(cursor, max_bytes, limit)) {
    if (!got.empty() && got.back().stream == piece->stream) {
      got.back().data += piece->data;
    } else {
      got.push_back({piece->stream, std::string(piece->data)});
    }
  }
  return got;
}

TEST(OutputRingTest, KeepsBothStreamsInProductionOrderWithOffsets) {
  OutputRing ring;
  ring.Append(kStdoutStream, "one\n");
  ring.Append(kStderrStream, "err\n");
  ring.Append(kStdoutStream, "two\n");
  EXPECT_EQ(ring.total(kStdoutStream), 8u);
  EXPECT_EQ(ring.total(kStderrStream), 4u);
  EXPECT_EQ(ring.start(kStdoutStream), 0u);

  auto cursor = ring.CursorAt(0, 0);
  std::vector<Received> expected = {{kStdoutStream, "one\n"}, {kStderrStream, "err\n"}, {kStdoutStream, "two\n"}};
  EXPECT_EQ(Drain(ring, cursor), expected);
  EXPECT_EQ(cursor.offset[kStdoutStream], 8u);
  EXPECT_EQ(cursor.offset[kStderrStream], 4u);
}

TEST(OutputRingTest, ResumingFromOffsetsGivesExactlyTheRest) {
  OutputRing ring;
  ring.Append(kStdoutStream, "0123456789");
  ring.Append(kStderrStream, "abcdef");
  ring.Append(kStdoutStream, "ABCDEF");
  auto cursor = ring.CursorAt(7, 6);  // stderr fully seen already
  std::vector<Received> expected = {{kStdoutStream, "789ABCDEF"}};
  EXPECT_EQ(Drain(ring, cursor), expected);
}

TEST(OutputRingTest, CaughtUpCursorSeesTheLastChunkGrow) {
  OutputRing ring;
  ring.Append(kStdoutStream, "abc");
  auto cursor = ring.CursorAt(0, 0);
  EXPECT_EQ(Drain(ring, cursor), (std::vector<Received>{{kStdoutStream, "abc"}}));
  EXPECT_EQ(Drain(ring, cursor), std::vector<Received>{});
  ring.Append(kStdoutStream, "def");
  ring.Append(kStderrStream, "x");
  std::vector<Received> expected = {{kStdoutStream, "def"}, {kStderrStream, "x"}};
  EXPECT_EQ(Drain(ring, cursor), expected);
  EXPECT_EQ(ring.chunks(), 2u);  // "abcdef" shares one chunk
}

TEST(OutputRingTest, ReadsAtMostMaxBytesAtATime) {
  OutputRing ring;
  ring.Append(kStdoutStream, std::string(10, 'x'));
  auto cursor = ring.CursorAt(0, 0);
  auto piece = ring.Read(cursor, 4, kUnlimited);
  ASSERT_TRUE(piece);
  EXPECT_EQ(piece->data, "xxxx");
  EXPECT_EQ(cursor.offset[kStdoutStream], 4u);
}

TEST(OutputRingTest, DropsOldestWholeChunksBeyondCapacity) {
  OutputRing ring(/*capacity=*/100);
  ring.Append(kStdoutStream, std::string(60, 'a'));
  ring.Append(kStderrStream, std::string(30, 'b'));
  ring.Append(kStdoutStream, std::string(30, 'c'));  // 120 bytes: the 60-byte chunk goes
  EXPECT_EQ(ring.bytes(), 60u);
  EXPECT_EQ(ring.start(kStdoutStream), 60u);
  EXPECT_EQ(ring.start(kStderrStream), 0u);
  EXPECT_EQ(ring.total(kStdoutStream), 90u);

  // An offset that was dropped starts where the ring does; one beyond the end, at the end.
  auto cursor = ring.CursorAt(10, 1000);
  EXPECT_EQ(cursor.offset[kStdoutStream], 60u);
  EXPECT_EQ(cursor.offset[kStderrStream], 30u);
  EXPECT_EQ(Drain(ring, cursor), (std::vector<Received>{{kStdoutStream, std::string(30, 'c')}}));
}

TEST(OutputRingTest, LargeOutputKeepsTheNewestCapacityBytes) {
  OutputRing ring(/*capacity=*/4 * OutputRing::kChunkBytes);
  std::string all;
  for (int i = 0; all.size() < 20 * OutputRing::kChunkBytes; ++i) all += std::to_string(i) + "\n";
  for (size_t at = 0; at < all.size(); at += 1000) ring.Append(kStdoutStream, std::string_view(all).substr(at, 1000));
  EXPECT_LE(ring.bytes(), 4 * OutputRing::kChunkBytes);
  EXPECT_GT(ring.bytes(), 3 * OutputRing::kChunkBytes);
  uint64_t start = ring.start(kStdoutStream);
  auto cursor = ring.CursorAt(0, 0);
  auto got = Drain(ring, cursor);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, all.substr(size_t(start)));
}

TEST(OutputRingTest, DropOldestChunkGivesUpTheOldestOutputForInitsBudget) {
  OutputRing ring;
  ring.Append(kStdoutStream, "first");
  ring.Append(kStderrStream, "second");
  EXPECT_EQ(ring.first_chunk(), 0u);
  EXPECT_EQ(ring.DropOldestChunk(), 5u);
  EXPECT_EQ(ring.first_chunk(), 1u);
  EXPECT_EQ(ring.bytes(), 6u);
  EXPECT_EQ(ring.start(kStdoutStream), 5u);  // a reader from 0 now has a gap
  OutputRing::Cursor cursor = ring.CursorAt(0, 0);
  EXPECT_EQ(Drain(ring, cursor), (std::vector<Received>{{kStderrStream, "second"}}));
  EXPECT_EQ(ring.DropOldestChunk(), 6u);
  EXPECT_EQ(ring.DropOldestChunk(), 0u);  // empty
}

TEST(OutputRingTest, ChunkCountIsBoundedToo) {
  OutputRing ring(/*capacity=*/1 << 20, /*max_chunks=*/8);
  for (int i = 0; i < 10; ++i) {
    ring.Append(kStdoutStream, "o");
    ring.Append(kStderrStream, "e");
  }
  EXPECT_EQ(ring.chunks(), 8u);
  EXPECT_EQ(ring.start(kStdoutStream), 6u);
  EXPECT_EQ(ring.start(kStderrStream), 6u);
}

TEST(OutputRingTest, CursorBehindTheRingReportsAGapOnlyForUnsentBytes) {
  OutputRing ring(/*capacity=*/100);
  ring.Append(kStdoutStream, std::string(50, 'a'));
  auto reader = ring.CursorAt(0, 0);
  auto slow = ring.CursorAt(0, 0);
  Drain(ring, reader);  // has all of the first chunk, still positioned on it
  ring.Append(kStderrStream, std::string(40, 'b'));
  ring.Append(kStdoutStream, std::string(40, 'c'));  // drops the 50 bytes of 'a'

  EXPECT_FALSE(ring.SkipDropped(reader));  // it had every dropped byte
  EXPECT_EQ(reader.offset[kStdoutStream], 50u);
  std::vector<Received> rest = {{kStderrStream, std::string(40, 'b')}, {kStdoutStream, std::string(40, 'c')}};
  EXPECT_EQ(Drain(ring, reader), rest);

  EXPECT_TRUE(ring.SkipDropped(slow));
  EXPECT_EQ(slow.offset[kStdoutStream], 50u);
  EXPECT_EQ(slow.offset[kStderrStream], 0u);
  EXPECT_EQ(Drain(ring, slow), rest);
}

TEST(OutputRingTest, LimitStopsAtOutputProducedLater) {
  OutputRing ring;
  ring.Append(kStdoutStream, "early");
  ring.Append(kStderrStream, "E");
  const uint64_t limit[2] = {ring.total(kStdoutStream), ring.total(kStderrStream)};
  ring.Append(kStderrStream, "late");
  ring.Append(kStdoutStream, "late");
  auto cursor = ring.CursorAt(0, 0);
  std::vector<Received> expected = {{kStdoutStream, "early"}, {kStderrStream, "E"}};
  EXPECT_EQ(Drain(ring, cursor, 1 << 20, limit), expected);
}

}  // namespace
}  // namespace bulkhead::init
