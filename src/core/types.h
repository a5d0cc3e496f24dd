// The typed requests and records that cross the api/ -> core/ edge. api/ parses and
// validates JSON into these; core/ never sees HTTP or JSON.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ctl_messages.h"
#include "runtime/usage.h"
#include "storage/image_info.h"

namespace bulkhead::core {

struct NetworkPolicy {
  std::string mode = "none";       // none | allowlist | open
  std::vector<std::string> allow;  // entries, kept as given (net/allow_rules.h)
  std::vector<std::string> deny;   // entries checked before `allow`, kept as given
};

// One entry of a sandbox's "volumes": the named volume appears at `path` inside it.
struct VolumeMount {
  std::string name;
  std::string path;  // absolute and normalized (validate.cc)
  bool read_only = false;
  bool operator==(const VolumeMount&) const = default;
};

// Who may reach a sandbox's ports by preview host name ({port}-{id}.{preview_domain}).
// Public: anyone who knows the id. Private: requests must carry `token`, which the manager
// issues for each new sandbox (a fork or a sandbox from a snapshot gets its own).
struct PreviewAccess {
  bool is_public = true;
  std::string token;  // "" while public
};

// POST /v1/sandboxes, after validation; every field has its default filled in.
struct SandboxSpec {
  std::string image = "host";
  // The registry reference the create named (image then holds the stored image's name, its
  // manifest digest's hex, which a moved tag cannot change under a sandbox). "" otherwise.
  std::string image_ref;
  std::string runtime = "native";
  double cpus = 1.0;
  int64_t memory_mb = 1024;
  int64_t disk_mb = 2048;
  int64_t pids = 512;
  int64_t timeout_s = 300;       // 0 = no lifetime limit
  int64_t idle_timeout_s = 0;
  std::string on_timeout = "kill";  // kill | pause | stop: what the timeout does
  std::map<std::string, std::string> env;
  std::string workdir = "/workspace";
  std::string user = "root";
  NetworkPolicy network;
  std::map<std::string, std::string> metadata;
  std::vector<VolumeMount> volumes;
  PreviewAccess preview;
  // Who may run the sandbox's `sudo` (names or uids, validate.cc); empty: no sudo socket.
  std::vector<std::string> sudo_users;
  // The snapshot whose files the sandbox starts with (SandboxInfo.parent_snapshot). With it
  // an empty image means "the snapshot's".
  std::optional<std::string> from_snapshot;
  // E2B's lifecycle.autoResume, set by the E2B front and read only there: traffic through
  // the front to a paused sandbox resumes it; without it that traffic answers 502, as E2B's
  // proxy does. (The bulkhead API resumes a paused sandbox for any call regardless.)
  bool e2b_auto_resume = false;
  // The tenant it belongs to (service/access_keys.h); "" for the host admin's. Its snapshots
  // and forks are the tenant's too.
  std::string tenant;
  // Whether a create from a snapshot keeps that snapshot's pool warm (a build's step sandboxes,
  // each from a snapshot used once, do not). Not stored.
  bool warm_snapshot = true;
  // Whether its output is read at the daemon's --output-rate (a build's step sandboxes are not:
  // the daemon itself reads what they archive, to disk). Not stored.
  bool output_capped = true;
};

// The metadata key of a build's step sandboxes (service/image_build.h): a daemon that starts
// again removes those it finds, their build gone with the daemon before.
inline constexpr char kBuildSandboxMetadata[] = "bulkhead.build";
// The name prefix of the snapshots that are a build's cache entries ("bulkhead-build:<key>").
inline constexpr char kBuildSnapshotPrefix[] = "bulkhead-build:";

// The Volume object: a named directory with a size cap that sandboxes mount and outlive.
struct VolumeInfo {
  std::string name;
  std::string tenant;  // "" for the host's
  int64_t size_mb = 0;
  std::string created_at;  // RFC 3339 UTC
  int64_t used_bytes = 0;
  std::vector<std::string> mounted_by;  // ids of the sandboxes (any state) that list it
};

using SandboxUsage = runtime::Usage;

// The Sandbox object of API.md.
struct SandboxInfo {
  std::string id;
  std::string state;  // starting | running | paused | stopped | error
  SandboxSpec spec;
  std::string created_at;  // RFC 3339 UTC
  std::optional<std::string> expires_at;
  std::optional<std::string> parent_snapshot;
  // Paused to disk: its memory and processes written out, none running and no RAM held; the
  // next call that needs it restores them.
  bool paused_to_disk = false;
  std::optional<SandboxUsage> usage;  // filled by Get only
  // What the tier made for this running sandbox (runtime::Tier::SandboxDetails): Get only.
  std::vector<std::pair<std::string, std::string>> runtime_details;
};

struct ListFilter {
  std::optional<std::string> id;  // only this sandbox: its state without Get's usage readings
  std::optional<std::string> state;
  std::map<std::string, std::string> metadata;  // all must match
  std::optional<std::string> tenant;            // only this tenant's ("" the host admin's own)
};

// POST /v1/sandboxes/{id}/exec, after validation.
struct ExecRequest {
  std::vector<std::string> argv;  // a string command arrives here as {"/bin/sh", "-c", cmd}
  std::optional<std::string> cwd;   // default: the sandbox's workdir
  std::map<std::string, std::string> env;  // merged over the sandbox's env
  std::optional<std::string> user;  // default: the sandbox's user
  std::optional<std::string> stdin_data;  // raw bytes (decoded from stdin or stdin_b64)
  int64_t timeout_s = 60;           // 0 = no limit
  // Bytes of each output stream the caller keeps; init drops the rest (ctl "output_limit").
  std::optional<int64_t> output_limit;
};

// How a command ended (exit_code set when it exited, signal when a signal ended it).
using ExitStatus = ctl::ExitMessage;

struct ExecEvent {
  enum class Type { kStarted, kStdout, kStderr, kExit };
  Type type = Type::kStarted;
  int pid = 0;       // kStarted
  std::string data;  // kStdout / kStderr: raw bytes, may not be UTF-8
  ExitStatus exit;   // kExit
};

// The Snapshot object of API.md: a sandbox's files as they were, and with `memory` its memory
// and processes too (its runtime's, which alone restores them); immutable.
struct SnapshotInfo {
  std::string id;
  std::string name;  // "" = none given
  std::string sandbox_id;
  std::string created_at;  // RFC 3339 UTC
  int64_t size_bytes = 0;  // files and memory image
  std::string image;
  bool memory = false;
  std::string runtime;  // the sandbox's runtime when it was taken
  std::string tenant;   // the sandbox's tenant ("" the host admin's)
};

using storage::ImageInfo;  // storage/image_info.h

}  // namespace bulkhead::core
