// Signal names as clients write them ("SIGTERM", "TERM", 15) and back. A fixed table of
// the Linux signals, not strsignal(): the API must not depend on the C library's wording.
#pragma once
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::api {

// "SIGTERM", "TERM", "sigterm", "SIGRTMIN+2", "15" -> the number; nullopt if unknown.
std::optional<int> SignalNumber(std::string_view name);

// A signal field of a request: a name as above or an integer in 1..64. 422 otherwise,
// with a message naming `field`.
Result<int> ParseSignal(const nlohmann::json& value, std::string_view field);

}  // namespace bulkhead::api
