// The API key: who may talk to the daemon. Every route but GET /healthz needs
// "Authorization: Bearer <key>".
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "common/digest.h"
#include "common/result.h"

namespace bulkhead::api {

// `configured_key` (BULKHEAD_API_KEY) if not empty; else the key in <state_dir>/api-key,
// created on first start from 32 random bytes (64 hex digits), mode 0600. Creation is
// atomic: a complete file appears under its final name or none does, and of two daemons
// starting at once both end up with the same key.
Result<std::string> LoadOrCreateApiKey(const std::string& state_dir, const std::string& configured_key);

// What vouches for the memory images this host exports and restores from an import
// (storage/snapshot_archive.h): <state_dir>/memory-image-key, created the same way. Hosts that
// should restore each other's memory snapshots are given the same file.
Result<std::string> LoadOrCreateMemoryImageKey(const std::string& state_dir);

// The key of the E2B-compatible front (X-API-KEY): <state_dir>/e2b-api-key, created the same
// way, shaped as E2B's keys are ("e2b_" and 40 hex digits).
Result<std::string> LoadOrCreateE2bKey(const std::string& state_dir);

// The key of an Authorization header value "Bearer <key>" (the scheme in any case), if it is one.
std::optional<std::string_view> BearerToken(std::string_view authorization);

// True if `authorization` (an Authorization header value) is "Bearer <key>". The key is
// compared in time independent of where it differs.
bool IsAuthorized(std::string_view authorization, std::string_view key);

using bulkhead::ConstantTimeEquals;  // common/digest.h

}  // namespace bulkhead::api
