// JSON on the wire: error bodies, serializing a response, parsing a request body.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::api {

// The snake_case code of an error: its detail_code if set, else the generic name.
std::string ErrorCodeOf(const Error& error);
// {"error": {"code": "...", "message": "..."}}
nlohmann::json ErrorToJson(const Error& error);

// Serializes for the wire. Strings that are not valid UTF-8 (which validation and the
// output encoders should already prevent) are repaired instead of throwing.
std::string DumpJson(const nlohmann::json& value);

// Parses a request body. Empty means {}. Malformed JSON (or nesting deeper than 64) is
// 400 bad_request; anything but an object is 422.
Result<nlohmann::json> ParseJsonObject(std::string_view body);

}  // namespace bulkhead::api
