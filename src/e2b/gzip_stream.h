// gzip (RFC 1952) both ways, a piece at a time, with zlib: /files answers Accept-Encoding:
// gzip with a compressed download and takes uploads sent with Content-Encoding: gzip.
// Output comes in bounded slices, so a small "gzip bomb" never inflates into memory at once.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bulkhead::e2b {

class GzipInflater {
 public:
  GzipInflater();
  ~GzipInflater();
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;

  // The next compressed bytes; they must stay valid until Next answers an empty slice.
  void SetInput(std::string_view input);
  // The next at most `max_output` decompressed bytes of the input given; empty once it is
  // used up. 400 (kBadRequest) for data that is not gzip, or anything after its end.
  Result<std::string> Next(size_t max_output);
  // The whole gzip stream (its last member) ended.
  bool ended() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

class GzipDeflater {
 public:
  GzipDeflater();
  ~GzipDeflater();
  GzipDeflater(const GzipDeflater&) = delete;
  GzipDeflater& operator=(const GzipDeflater&) = delete;

  // The compressed bytes for `input` (possibly none yet: zlib buffers); with `finish`, all
  // that is left and the gzip trailer.
  Result<std::string> Compress(std::string_view input, bool finish);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace bulkhead::e2b
