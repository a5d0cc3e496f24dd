#include "common/random_hex.h"

#include <sys/random.h>

#include <cerrno>

namespace bulkhead {

Result<std::string> RandomHex(size_t byte_count) {
  unsigned char bytes[64];
  if (byte_count > sizeof(bytes)) return MakeError(ErrorCode::kInternal, "random secret too long");
  size_t filled = 0;
  while (filled < byte_count) {
    const ssize_t n = getrandom(bytes + filled, byte_count - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("getrandom", errno);
    }
    filled += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * byte_count);
  for (size_t i = 0; i < byte_count; ++i) {
    hex += kHex[bytes[i] >> 4];
    hex += kHex[bytes[i] & 15];
  }
  return hex;
}

}  // namespace bulkhead
