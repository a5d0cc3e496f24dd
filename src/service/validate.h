// Turns request JSON into the typed requests of core/types.h. Pure functions: every rule
// of API.md about what a client may ask for lives here, so it can be tested without HTTP.
//
// Conventions: a field that is absent or null takes its default; unknown fields are
// ignored (forward compatibility); a field of the wrong JSON type or with a value out of
// range is 422 invalid_argument with a message that names the field.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"
#include "common/result.h"
#include "core/audit_log.h"
#include "core/types.h"
#include "http/json_text.h"

namespace bulkhead::api {

// Limits that depend on the machine the daemon runs on.
// What this host allows a sandbox spec, and what it gives one that does not say.
struct HostLimits {
  double max_cpus = 1;
  int64_t max_memory_mb = 1024;
  std::string default_runtime = "native";  // serve --default-runtime
  // std::thread::hardware_concurrency and physical RAM; the runtime as given.
  static HostLimits Detect(std::string default_runtime = "native");
};

constexpr size_t kMaxEnvBytes = 256 * 1024;            // keys + values of one env map
constexpr size_t kMaxArgvBytes = 1024 * 1024;          // all of an exec's argv
constexpr size_t kMaxStdinBytes = 16 * 1024 * 1024;    // decoded stdin of one exec
constexpr int64_t kMaxOutputBytesLimit = 64 * 1024 * 1024;
constexpr int64_t kDefaultMaxOutputBytes = 16 * 1024 * 1024;
constexpr int64_t kMaxLifetimeS = 30 * 24 * 3600;      // timeout_s / idle_timeout_s
constexpr int64_t kMaxExecTimeoutS = 24 * 3600;

constexpr size_t kMaxVolumeMounts = 16;               // entries of a sandbox's "volumes"
constexpr size_t kMaxSudoUsers = ctl::kMaxSudoUsers;  // entries of a sandbox's "sudo_users"
constexpr int64_t kMaxVolumeSizeMb = 1048576;
constexpr int64_t kDefaultVolumeSizeMb = 1024;

// POST /v1/volumes after validation.
struct VolumeRequest {
  std::string name;
  int64_t size_mb = kDefaultVolumeSizeMb;
};

// POST /v1/sandboxes/{id}/exec after validation, plus the API-side output cap.
struct ExecOptions {
  core::ExecRequest request;
  int64_t max_output_bytes = kDefaultMaxOutputBytes;  // per stream; the rest is dropped
};

// "volumes" entries: the name must be valid (its existence is the core's to check: 404
// volume_not_found); the path absolute, normalized (no "//", ".", ".." or trailing "/"), not
// "/", not in /proc, /sys or /dev, and neither equal to nor inside another entry's path.
Result<core::SandboxSpec> ParseSandboxSpec(const nlohmann::json& body, const HostLimits& host);
// POST /v1/volumes: {"name" (required), "size_mb" (1..1048576, default 1024)}.
Result<VolumeRequest> ParseVolumeRequest(const nlohmann::json& body);
Result<ExecOptions> ParseExecOptions(const nlohmann::json& body);
// POST /v1/sandboxes/{id}/timeout: {"timeout_s": N}, required.
Result<int64_t> ParseTimeoutUpdate(const nlohmann::json& body);
// PUT /v1/sandboxes/{id}/network: {"mode", "allow"} (the network object of a sandbox).
Result<core::NetworkPolicy> ParseNetworkUpdate(const nlohmann::json& body);
// GET /v1/sandboxes/{id}/egress?limit=N: 1..10000, default 1000.
Result<int64_t> ParseEgressLimit(const std::vector<std::pair<std::string, std::string>>& query);
// GET /v1/audit?after=N&limit=N&action=A&target=T&since=TIME&until=TIME: after >= 0, limit
// 1..1000 (default 100), times in RFC 3339 (turned into the log's own form).
Result<core::AuditLog::Filter> ParseAuditFilter(const std::vector<std::pair<std::string, std::string>>& query);
// GET /v1/sandboxes?state=running&metadata.k=v (already percent-decoded pairs).
Result<core::ListFilter> ParseListFilter(
    const std::vector<std::pair<std::string, std::string>>& query);

// POST /v1/sandboxes/{id}/snapshots: {"name"?, "memory"?}: a name of 1 to kMaxSnapshotNameBytes
// bytes of UTF-8 without control characters, absent = "" (none); memory a boolean, absent or
// null = false (files only).
constexpr size_t kMaxSnapshotNameBytes = 128;
struct SnapshotRequest {
  std::string name;
  bool memory = false;
};
Result<SnapshotRequest> ParseSnapshotRequest(const nlohmann::json& body);
// POST /v1/sandboxes/{id}/pause: no body, or {"to_disk"?}: a boolean, absent or null = false
// (its memory stays in RAM). Answers to_disk.
Result<bool> ParsePauseRequest(const nlohmann::json& body);
// POST /v1/sandboxes/{id}/fork: {"count"?, "memory"?}: 1..kMaxForkCount, default 1; memory as
// for a snapshot.
constexpr int64_t kMaxForkCount = 16;
struct ForkRequest {
  int count = 1;
  bool memory = false;
};
Result<ForkRequest> ParseForkRequest(const nlohmann::json& body);

// ^[a-z0-9][a-z0-9._-]{0,63}$
bool IsValidImageName(std::string_view name);
// ^[a-z0-9][a-z0-9_.-]{0,62}$
bool IsValidVolumeName(std::string_view name);
// A sandbox id as it may appear in a path: ^[A-Za-z0-9_-]{1,128}$. Anything else cannot
// name a sandbox and is answered 404 without asking the core.
bool IsValidSandboxId(std::string_view id);
// The answer for an id that names no sandbox: 404 sandbox_not_found.
Error SandboxNotFound(const std::string& id);
Error SnapshotNotFound(const std::string& id);
// "name" (^[a-z_][a-z0-9_-]{0,31}$), "uid" or "uid:gid" (decimal, < 2^32 - 1).
bool IsValidUser(std::string_view user);

}  // namespace bulkhead::api
