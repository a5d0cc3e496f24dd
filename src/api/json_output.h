// The JSON shapes the API answers with (API.md), built from core types.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/types.h"
#include "net/egress_proxy.h"

namespace bulkhead::api {

nlohmann::json SandboxToJson(const core::SandboxInfo& sandbox);
// One entry of GET /v1/sandboxes/{id}/egress.
nlohmann::json EgressRecordToJson(const net::EgressRecord& record);
nlohmann::json ImageToJson(const core::ImageInfo& image);
nlohmann::json VolumeToJson(const core::VolumeInfo& volume);
// The Snapshot object: {"id","name","sandbox_id","created_at","size_bytes","memory","image"}.
nlohmann::json SnapshotToJson(const core::SnapshotInfo& snapshot);

// The snake_case code of an error: its detail_code if set, else the generic name.
std::string ErrorCodeOf(const Error& error);
// {"error": {"code": "...", "message": "..."}}
nlohmann::json ErrorToJson(const Error& error);

// "SIGKILL" for 9; "SIGRTMIN+2" for real-time signals; "SIG<n>" for numbers without a name.
std::string SignalName(int signal);

// Serializes for the wire. Strings that are not valid UTF-8 (which validation and the
// output encoders should already prevent) are repaired instead of throwing.
std::string DumpJson(const nlohmann::json& value);

}  // namespace bulkhead::api
