#include "e2b/gzip_stream.h"

#include <zlib.h>

namespace bulkhead::e2b {

namespace {
constexpr int kGzipWindowBits = 15 + 16;  // 32 KiB window, gzip header and trailer
}  // namespace

struct GzipInflater::State {
  z_stream z{};
  bool initialized = false;
  bool member_ended = false;  // the last member's trailer was read
  bool failed = false;
};

GzipInflater::GzipInflater() : state_(std::make_unique<State>()) {
  state_->initialized = inflateInit2(&state_->z, kGzipWindowBits) == Z_OK;
}

GzipInflater::~GzipInflater() {
  if (state_->initialized) inflateEnd(&state_->z);
}

void GzipInflater::SetInput(std::string_view input) {
  state_->z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input.data()));
  state_->z.avail_in = static_cast<uInt>(input.size());
}

bool GzipInflater::ended() const { return state_->member_ended; }

Result<std::string> GzipInflater::Next(size_t max_output) {
  State& s = *state_;
  if (!s.initialized) return MakeError(ErrorCode::kInternal, "zlib could not be initialized");
  if (s.failed) return MakeError(ErrorCode::kBadRequest, "the gzip body is malformed");
  std::string out(max_output, '\0');
  size_t produced = 0;
  while (produced < max_output && s.z.avail_in > 0) {
    if (s.member_ended) {
      // Another member follows (concatenated gzip files are one stream, as gunzip reads them).
      if (inflateReset(&s.z) != Z_OK) return MakeError(ErrorCode::kInternal, "zlib could not reset");
      s.member_ended = false;
    }
    s.z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    s.z.avail_out = static_cast<uInt>(max_output - produced);
    const int rc = inflate(&s.z, Z_NO_FLUSH);
    produced = max_output - s.z.avail_out;
    if (rc == Z_STREAM_END) {
      s.member_ended = true;
      continue;
    }
    if (rc == Z_BUF_ERROR) break;  // needs more input (or room): not an error
    if (rc != Z_OK) {
      s.failed = true;
      return MakeError(ErrorCode::kBadRequest, std::string("the gzip body is malformed: ") +
                                                   (s.z.msg ? s.z.msg : "inflate failed"));
    }
  }
  out.resize(produced);
  return out;
}

struct GzipDeflater::State {
  z_stream z{};
  bool initialized = false;
  bool finished = false;
};

GzipDeflater::GzipDeflater() : state_(std::make_unique<State>()) {
  state_->initialized =
      deflateInit2(&state_->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindowBits, 8, Z_DEFAULT_STRATEGY) == Z_OK;
}

GzipDeflater::~GzipDeflater() {
  if (state_->initialized) deflateEnd(&state_->z);
}

Result<std::string> GzipDeflater::Compress(std::string_view input, bool finish) {
  State& s = *state_;
  if (!s.initialized) return MakeError(ErrorCode::kInternal, "zlib could not be initialized");
  if (s.finished) return std::string();
  s.z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input.data()));
  s.z.avail_in = static_cast<uInt>(input.size());
  std::string out;
  char buffer[64 * 1024];
  for (;;) {
    s.z.next_out = reinterpret_cast<Bytef*>(buffer);
    s.z.avail_out = sizeof(buffer);
    const int rc = deflate(&s.z, finish ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR) return MakeError(ErrorCode::kInternal, "deflate failed");
    out.append(buffer, sizeof(buffer) - s.z.avail_out);
    if (rc == Z_STREAM_END) {
      s.finished = true;
      break;
    }
    // Without finish, done once zlib took all the input and had room left over.
    if (!finish && s.z.avail_in == 0 && s.z.avail_out != 0) break;
  }
  return out;
}

}  // namespace bulkhead::e2b
