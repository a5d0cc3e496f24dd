// The output a background process keeps (ctl_protocol.h): stdout and stderr together, in the
// order they were produced, at most a fixed number of bytes; the oldest whole chunks are
// dropped as new output arrives. Memory grows with the output, so a quiet process costs little.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "common/ctl_protocol.h"

namespace bulkhead::init {

enum OutputStream : uint8_t { kStdoutStream = 0, kStderrStream = 1 };

class OutputRing {
 public:
  // Consecutive output of one stream shares a chunk up to this size.
  static constexpr size_t kChunkBytes = 64 * 1024;
  // Tiny writes alternating between stdout and stderr make tiny chunks; their bookkeeping is
  // bounded by dropping the oldest beyond this many.
  static constexpr size_t kMaxChunks = 16384;

  explicit OutputRing(size_t capacity = ctl::kProcessRingBytes, size_t max_chunks = kMaxChunks)
      : capacity_(capacity), max_chunks_(max_chunks) {}

  void Append(OutputStream stream, std::string_view data);

  // Bytes the stream produced so far, and the oldest offset the ring still holds (== total
  // when it holds none of them).
  uint64_t total(OutputStream stream) const { return total_[stream]; }
  uint64_t start(OutputStream stream) const { return start_[stream]; }
  size_t bytes() const { return bytes_; }
  size_t chunks() const { return chunks_.size(); }
  // The sequence number of the oldest chunk held (Cursor::chunk counts the same way).
  uint64_t first_chunk() const { return first_chunk_; }
  // Drops the oldest chunk, for init's budget of all rings together; its bytes (0: empty).
  size_t DropOldestChunk();

  // A reader's position: the next chunk to look at and how far it got in each stream.
  struct Cursor {
    uint64_t chunk = 0;  // sequence number of a chunk (the first chunk ever is 0)
    uint64_t offset[2] = {0, 0};
  };
  // A cursor at the given offsets, moved to what the ring holds: later if those bytes were
  // dropped, back to the end if an offset lies beyond it.
  Cursor CursorAt(uint64_t stdout_offset, uint64_t stderr_offset) const;

  // Moves a cursor that fell behind past dropped chunks. Returns true if it skipped bytes it
  // had not been given (a gap); the cursor's offsets then say where it continues.
  bool SkipDropped(Cursor& cursor) const;

  struct Piece {
    OutputStream stream;
    std::string_view data;  // valid until the next Append
  };
  // The next output for `cursor` in production order: at most `max_bytes`, nothing at or past
  // limit[stream]. Advances the cursor past what it returns. Nothing once it caught up.
  // The cursor must not be behind (SkipDropped first).
  std::optional<Piece> Read(Cursor& cursor, size_t max_bytes, const uint64_t limit[2]) const;

 private:
  struct Chunk {
    OutputStream stream;
    uint64_t offset;  // of its first byte, in its stream
    std::string data;
    uint64_t end() const { return offset + data.size(); }
  };

  void DropOldest();

  size_t capacity_;
  size_t max_chunks_;
  std::deque<Chunk> chunks_;
  uint64_t first_chunk_ = 0;  // sequence number of chunks_.front()
  size_t bytes_ = 0;
  uint64_t total_[2] = {0, 0};
  uint64_t start_[2] = {0, 0};
};

}  // namespace bulkhead::init
