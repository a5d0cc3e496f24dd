#include "cli/local_files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "client/exec_stream.h"

namespace bulkhead::cli {
namespace {

constexpr size_t kFileChunkBytes = 256 << 10;

}  // namespace

Status SendFile(int fd, std::optional<uint64_t> size, const std::string& what, const BodyChunkSink& sink) {
  std::vector<char> buffer(kFileChunkBytes);
  uint64_t sent = 0;
  while (!size || sent < *size) {
    size_t want = size ? static_cast<size_t>(std::min<uint64_t>(buffer.size(), *size - sent)) : buffer.size();
    ssize_t n = ::read(fd, buffer.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("reading " + what, errno);
    }
    if (n == 0) {
      if (!size) return {};
      return MakeError(ErrorCode::kInternal, what + " shrank while being sent", "file_changed");
    }
    BH_TRY(sink(std::string_view(buffer.data(), static_cast<size_t>(n))));
    sent += static_cast<uint64_t>(n);
  }
  return {};
}

Status Drain(StreamedResponse& response, int fd) {
  for (;;) {
    auto piece = response.Read();
    if (!piece.ok()) return piece.error();
    if (piece->empty()) return {};
    BH_TRY(WriteAll(fd, *piece));
  }
}

}  // namespace bulkhead::cli
