// Builds an image from a Dockerfile (build/dockerfile.h), the way `docker build` does, with
// every step that touches files run in a bulkhead sandbox of the build's tier and network
// policy: a build is as isolated as any sandbox.
//
// Each file step (RUN, COPY, ADD, WORKDIR) starts a sandbox from the state the step before left
// (the base image, or the snapshot of that step), does its work there, and is snapshotted: the
// snapshot, named "bulkhead-build:<key hex>", is the step's cache entry. A step's key covers
// the key before it, the instruction as evaluated (command, environment, user, working dir)
// and, for COPY and ADD, the content of what it copies; so a changed source invalidates that
// step and every one after it. The result is the target stage's last state, archived from a
// sandbox (what is mounted there left out) and stored as an image keyed by the whole build
// (storage.h InstallBuiltImage), under the build's name: a build whose every step is cached
// and whose image exists is only named again.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <utility>  // before boost/asio (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/any_io_executor.hpp>
#include <nlohmann/json.hpp>

#include "core/sandbox_manager.h"

namespace bulkhead::api {

inline constexpr int64_t kDefaultBuildTimeoutS = 3600;
inline constexpr int64_t kMaxBuildTimeoutS = 7 * 24 * 3600;

struct BuildRequest {
  std::string context_dir;  // the unpacked context (build_context.h UnpackContext)
  std::string dockerfile;   // the Dockerfile's text
  std::string tag;          // the name the image gets ("" = none: answered by its id)
  std::vector<std::string> more_tags;  // further names it gets
  std::map<std::string, std::string> build_args;
  std::string target;       // a stage name; "" = the last stage
  std::string runtime;      // "" = the daemon's default tier
  core::NetworkPolicy network;  // what RUN steps reach: none unless asked
  bool no_cache = false;
  std::string pull = "missing";  // FROM images: missing | always | never
  double cpus = 2.0;
  int64_t memory_mb = 2048;
  int64_t disk_mb = 10240;
  // The whole build's time, pulls of base images included; 0 = none. Past it the running step's
  // sandbox goes and the build fails (422 build_timeout): a RUN that never ends holds nothing.
  int64_t timeout_s = kDefaultBuildTimeoutS;
  std::string work_dir;  // a private scratch directory for the build's tars
  // Whose build it is ("" the host's): its step sandboxes are the tenant's (its quotas and egress
  // rules), its cache is the tenant's own, and the image it makes the tenant's alone.
  std::string tenant;
};

// The build's progress, as NDJSON-ready objects ({"status": "step" | "output" | "warning" |
// "exporting", ...}, and a pull's events for its base images); called from any thread.
using BuildListener = std::function<void(const nlohmann::json& event)>;

// Runs the build (blocking: on a thread of its own, never an io thread; `io` runs the
// coroutines that talk to the sandboxes). 400 for a Dockerfile it refuses, 404 for a base
// image it lacks (pull "never") or cannot pull, 422 build_failed naming the failing step with
// the end of its output, 422 build_timeout past request.timeout_s. `cancelled` is checked between
// steps, and a running step's sandbox goes as soon as it is set.
Result<core::ImageInfo> RunBuild(core::SandboxManager& manager, const boost::asio::any_io_executor& io,
                                 const BuildRequest& request, const BuildListener& listener,
                                 const std::atomic<bool>& cancelled);

// POST /v1/images/build's query: tag, dockerfile (a path in the context; default
// "Dockerfile"), target, runtime, pull, no_cache (true|false), build_arg=NAME=value and
// allow=ENTRY (repeatable; allow entries make the network mode allowlist), network (none |
// allowlist | open), cpus, memory_mb, disk_mb, timeout_s. Fills all but context_dir, dockerfile and
// work_dir; answers the Dockerfile's path. 400 naming the parameter.
Result<std::string> ParseBuildQuery(const std::vector<std::pair<std::string, std::string>>& query, BuildRequest& out);

// How many cache entries (core::kBuildSnapshotPrefix snapshots) are kept: after each build the
// oldest beyond it are deleted (one a sandbox still uses stays). `keep` 0 empties the cache;
// answers how many entries were deleted.
inline constexpr size_t kBuildCacheEntries = 256;
size_t PruneBuildCache(core::SandboxManager& manager, size_t keep = kBuildCacheEntries);

// The file sets E2B template builds COPY from (e2b/templates.h), uploaded ahead of a build and
// kept, by their hash, under <upload dir>/<kTemplateFilesDir>: part of the build cache. After
// each upload the oldest beyond kTemplateFileSets go; `keep` 0 empties it. Answers how many
// sets were deleted.
inline constexpr char kTemplateFilesDir[] = "e2b-files";
inline constexpr size_t kTemplateFileSets = 1000;
size_t PruneTemplateFiles(const std::string& upload_dir, size_t keep = kTemplateFileSets);
// A set's file name there: its hash, after "<tenant>." for a tenant's (each tenant uploads its
// own: another's set of the same hash is not its to build from; tenant names hold no '.').
std::string TemplateFileSetName(const std::string& tenant, const std::string& hash);
// Removes a tenant's file sets (its purge); answers how many went.
size_t RemoveTemplateFiles(const std::string& upload_dir, const std::string& tenant);

}  // namespace bulkhead::api
