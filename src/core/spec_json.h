// SandboxSpec <-> JSON for the state database (not the API's wire format, which api/ owns).
#pragma once
#include <string>

#include "common/result.h"
#include "core/types.h"

namespace bulkhead::core {

std::string SpecToJson(const SandboxSpec& spec);
Result<SandboxSpec> SpecFromJson(const std::string& text);

}  // namespace bulkhead::core
