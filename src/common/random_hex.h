// Secrets from the kernel's random source, as hex: API keys and preview tokens.
#pragma once
#include <cstddef>
#include <string>

#include "common/result.h"

namespace bulkhead {

// `byte_count` (at most 64) random bytes from getrandom(2), as 2 * byte_count lower-case hex
// digits. An error only if the kernel refuses.
Result<std::string> RandomHex(size_t byte_count);

}  // namespace bulkhead
