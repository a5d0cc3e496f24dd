// The JSON shapes the API answers with (API.md), built from core types.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/types.h"
#include "http/json_text.h"
#include "net/egress_proxy.h"

namespace bulkhead::api {

nlohmann::json SandboxToJson(const core::SandboxInfo& sandbox);
nlohmann::json ImageToJson(const core::ImageInfo& image);
nlohmann::json VolumeToJson(const core::VolumeInfo& volume);
// The Snapshot object: {"id","name","sandbox_id","created_at","size_bytes","memory","image"}.
nlohmann::json SnapshotToJson(const core::SnapshotInfo& snapshot);

// "SIGKILL" for 9; "SIGRTMIN+2" for real-time signals; "SIG<n>" for numbers without a name.
std::string SignalName(int signal);

}  // namespace bulkhead::api
