// Checks a tool call's arguments against the tool's input schema before the handler runs,
// so a model gets one precise message ("timeout_s must be an integer from 1 to 3600")
// instead of a failure deep in the API. Covers the JSON Schema keywords the tools use:
// type, properties, required, additionalProperties, enum, minimum, maximum, minLength,
// maxLength, items, minItems, maxItems.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace bulkhead::mcp {

// nullopt when `arguments` fits `schema`; else what is wrong, naming the argument.
std::optional<std::string> CheckArguments(const nlohmann::json& schema, const nlohmann::json& arguments);

}  // namespace bulkhead::mcp
