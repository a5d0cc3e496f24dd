#include "init/output_ring.h"

#include <algorithm>

namespace bulkhead::init {

void OutputRing::Append(OutputStream stream, std::string_view data) {
  while (!data.empty()) {
    if (chunks_.empty() || chunks_.back().stream != stream || chunks_.back().data.size() >= kChunkBytes) {
      // The previous chunk is complete: give back what its string over-allocated while growing.
      if (!chunks_.empty() && chunks_.back().data.capacity() > chunks_.back().data.size() + 4096) {
        chunks_.back().data.shrink_to_fit();
      }
      chunks_.push_back(Chunk{stream, total_[stream], {}});
    }
    Chunk& chunk = chunks_.back();
    size_t take = std::min(data.size(), kChunkBytes - chunk.data.size());
    chunk.data.append(data.substr(0, take));
    data.remove_prefix(take);
    total_[stream] += take;
    bytes_ += take;
    while (!chunks_.empty() && (bytes_ > capacity_ || chunks_.size() > max_chunks_)) DropOldest();
  }
}

void OutputRing::DropOldest() {
  Chunk& oldest = chunks_.front();
  start_[oldest.stream] = oldest.end();
  bytes_ -= oldest.data.size();
  chunks_.pop_front();
  ++first_chunk_;
}

size_t OutputRing::DropOldestChunk() {
  if (chunks_.empty()) return 0;
  size_t size = chunks_.front().data.size();
  DropOldest();
  return size;
}

OutputRing::Cursor OutputRing::CursorAt(uint64_t stdout_offset, uint64_t stderr_offset) const {
  Cursor cursor;
  cursor.chunk = first_chunk_;
  uint64_t requested[2] = {stdout_offset, stderr_offset};
  for (int s = 0; s < 2; ++s) cursor.offset[s] = std::clamp(requested[s], start_[s], total_[s]);
  return cursor;
}

bool OutputRing::SkipDropped(Cursor& cursor) const {
  if (cursor.chunk >= first_chunk_) return false;
  // Every chunk before cursor.chunk was read completely, so only the dropped chunks from
  // cursor.chunk on can hold bytes this reader has not had.
  cursor.chunk = first_chunk_;
  bool gap = false;
  for (int s = 0; s < 2; ++s) {
    if (cursor.offset[s] < start_[s]) {
      cursor.offset[s] = start_[s];
      gap = true;
    }
  }
  return gap;
}

std::optional<OutputRing::Piece> OutputRing::Read(Cursor& cursor, size_t max_bytes, const uint64_t limit[2]) const {
  while (cursor.chunk >= first_chunk_ && cursor.chunk - first_chunk_ < chunks_.size()) {
    const Chunk& chunk = chunks_[cursor.chunk - first_chunk_];
    uint64_t& position = cursor.offset[chunk.stream];
    uint64_t from = std::max(position, chunk.offset);
    uint64_t to = std::min(chunk.end(), limit[chunk.stream]);
    if (from < to) {
      size_t length = size_t(std::min<uint64_t>(to - from, max_bytes));
      position = from + length;
      return Piece{chunk.stream, std::string_view(chunk.data).substr(size_t(from - chunk.offset), length)};
    }
    // Output past the limit was produced after everything later: the reader is done.
    if (from < chunk.end()) return std::nullopt;
    // The last chunk may still grow: stay on it.
    if (cursor.chunk - first_chunk_ + 1 == chunks_.size()) return std::nullopt;
    ++cursor.chunk;
  }
  return std::nullopt;
}

}  // namespace bulkhead::init
