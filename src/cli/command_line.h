// The `bulkhead` command line: every subcommand and flag, parsed with CLI11 into plain
// values. Parsing only; running the commands lives in commands.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "client/server_url.h"
#include "common/result.h"
#include "core/config.h"

namespace bulkhead::cli {

enum class Command {
  kNone,
  kServe,
  kRun,
  kCreate,
  kExec,
  kList,
  kInspect,
  kRemove,
  kImageImport,
  kImageList,
  kImageRemove,
  kImagePull,
  kImageInspect,
  kImagePush,
  kBuild,         // build
  kImagePruneCache,  // image prune-cache
  kVersion,
  kCopy,         // cp
  kWatch,        // watch
  kShell,        // shell
  kProcessList,  // ps
  kLogs,         // logs
  kKill,         // kill
  kPortForward,  // port-forward
  kNetwork,      // network
  kEgress,       // egress
  kLifecycle,    // pause, resume, stop, start
  kVolumeCreate,  // volume create
  kVolumeList,    // volume ls
  kVolumeRemove,  // volume rm
  kSnapshotCreate,  // snapshot create
  kSnapshotList,    // snapshot ls
  kSnapshotRemove,  // snapshot rm
  kSnapshotExport,  // snapshot export
  kSnapshotImport,  // snapshot import
  kFork,            // fork
  kMcp,           // mcp
  kE2bEnv,        // e2b env
  kAuditVerify,   // audit verify
  kAuditExport,   // audit export
  kTenantCreate,  // tenant create
  kTenantList,    // tenant ls
  kTenantRemove,  // tenant rm
  kTenantShow,    // tenant show
  kTenantQuota,   // tenant quota
  kTenantEgress,  // tenant egress
  kKeyCreate,     // key create
  kKeyList,       // key ls
  kKeyRevoke,     // key revoke
};

// `bulkhead build`'s flags (service/image_build.h ParseBuildQuery).
struct BuildFlags {
  std::string context;
  std::string tag;
  std::string dockerfile;  // "" = CONTEXT/Dockerfile
  std::vector<std::string> build_args;
  std::string target;
  std::optional<std::string> runtime;
  bool no_cache = false;
  std::string pull;
  std::vector<std::string> allow;
  std::string network;
  std::optional<double> cpus;
  std::optional<int64_t> memory_mb;
  std::optional<int64_t> disk_mb;
  std::optional<int64_t> timeout_s;
};

// Flags that shape a new sandbox (run, create). Unset = the daemon's default.
struct SandboxFlags {
  std::optional<std::string> image;
  std::optional<std::string> runtime;
  std::optional<double> cpus;
  std::optional<int64_t> memory_mb;
  std::optional<int64_t> disk_mb;
  std::optional<int64_t> pids;
  std::optional<int64_t> timeout_s;
  std::vector<std::string> env;  // K=V, or K to take the value from this environment
  std::optional<std::string> workdir;
  std::optional<std::string> user;
  std::vector<std::string> metadata;  // k=v; create only
  std::optional<std::string> network;  // none | allowlist | open
  std::vector<std::string> allow;      // allowlist entries
  std::vector<std::string> deny;       // entries denied before allow (allowlist, open)
  std::vector<std::string> volumes;    // NAME:/path[:ro]
  bool private_preview = false;        // create only
  std::optional<std::string> from_snapshot;  // its files (and with memory its processes) from one
};

// Flags of one command (run, exec).
struct ExecFlags {
  std::vector<std::string> env;  // exec only (run puts env on the sandbox)
  std::optional<std::string> cwd;
  std::optional<std::string> user;
  std::optional<int64_t> timeout_s;
  bool forward_stdin = false;
  std::vector<std::string> argv;
};

struct CommandLine {
  Command command = Command::kNone;

  // Global.
  std::string url;                          // --url / BULKHEAD_URL; empty = the state dir's socket
  std::string ca_cert;                      // --ca-cert / BULKHEAD_CA_CERT (https:// only)
  std::string state_dir = "/var/lib/bulkhead";  // --state-dir / BULKHEAD_STATE
  std::string audit_head;   // audit verify --head SEQ:HASH
  uint64_t audit_after = 0;  // audit export --after SEQ

  // serve
  std::optional<std::string> listen;  // --listen / BULKHEAD_LISTEN
  std::vector<std::string> warm_pools;  // --warm-pool N | RUNTIME=N | IMAGE[@RUNTIME]=N, repeatable
  std::optional<std::string> runsc;
  bool no_microvm_templates = false;
  bool no_microvm_memory_snapshots = false;
  std::string idle_pause = "memory";  // --idle-pause memory|disk
  std::optional<std::string> default_runtime;
  std::optional<int> io_threads, blocking_threads;
  std::optional<int64_t> output_rate_mib;
  std::optional<int64_t> max_sandboxes;
  int64_t audit_keep_days = 0;
  int64_t egress_keep_days = 0;
  std::string tls_cert, tls_key;  // serve --tls-cert, --tls-key
  std::vector<std::string> dns_servers;
  std::optional<std::string> preview_domain;
  std::optional<std::string> e2b_listen;  // --e2b-listen
  std::optional<std::string> e2b_domain;  // --e2b-domain
  std::optional<std::string> open_subnet;
  std::optional<std::string> storage_driver;
  std::string default_registry;                 // --default-registry
  std::vector<std::string> insecure_registries;  // --insecure-registry, repeatable
  std::string registry_auth;                    // --registry-auth FILE (Docker's config.json)
  std::string registry_ca;                      // --registry-ca FILE

  SandboxFlags sandbox;  // run, create; network uses sandbox.allow and .deny
  std::optional<std::string> network_mode;  // network
  std::optional<int64_t> egress_limit;      // egress
  ExecFlags exec;        // run, exec

  std::string sandbox_id;                // exec, inspect
  std::vector<std::string> sandbox_ids;  // rm, pause, resume, stop, start
  std::string lifecycle_action;          // pause | resume | stop | start
  bool to_disk = false;                  // pause --to-disk
  bool json = false;                     // create, ls
  std::optional<std::string> state_filter;    // ls --state
  std::vector<std::string> metadata_filter;   // ls --metadata k=v
  std::string image_name;                // image import, pull, inspect, rm (a name or a reference)
  BuildFlags build;
  std::string platform;                  // image pull --platform
  std::string image_target;              // image push: where to
  std::string image_path;                // image import
  std::vector<std::string> volume_names; // volume create (one), volume rm
  std::optional<int64_t> volume_size_mb; // volume create --size-mb
  std::string for_tenant;  // volume and image commands, build: --tenant (the host's key: a tenant's)
  std::vector<std::string> tenant_names; // tenant create (one), tenant rm
  std::string tenant_name;               // tenant show, tenant quota
  bool tenant_purge = false;             // tenant rm --purge
  std::vector<std::string> tenant_quotas; // tenant create --quota, tenant quota: KEY=VALUE
  std::string tenant_egress_mode;          // tenant egress --mode: the default policy's
  std::vector<std::string> tenant_egress_allow;  // tenant egress --allow: the default policy's
  std::vector<std::string> tenant_egress_deny;   // tenant egress --deny: every sandbox's
  bool tenant_egress_clear = false;        // tenant egress --clear
  std::vector<std::string> key_ids;      // key revoke
  std::string key_tenant;                // key create --tenant
  std::string key_scope;                 // key create --scope
  std::string key_name;                  // key create --name
  int64_t key_ttl_s = 0;                 // key create --ttl
  std::optional<std::string> snapshot_name;  // snapshot create --name
  std::vector<std::string> snapshot_ids;     // snapshot rm
  std::string snapshot_id;                   // snapshot export
  std::string archive_path;                  // snapshot export, import: a file or "-"
  bool files_only = false;                   // snapshot import --files-only: no memory image
  bool memory = false;                       // snapshot create, fork: --memory
  int fork_count = 1;                        // fork -n

  // Files and processes inside a sandbox.
  std::string path;                      // ls ID [PATH], watch ID [PATH]
  std::optional<int> depth;              // ls ID -d
  bool no_recursive = false;             // watch
  std::string copy_source;               // cp
  std::string copy_destination;          // cp
  std::optional<std::string> shell_command;  // shell --cmd
  bool detach = false;                   // exec -d
  std::optional<std::string> tag;        // exec -d --tag
  std::string process;                   // logs, kill: a pid or a tag
  bool follow = false;                   // logs -f
  std::optional<int64_t> offset;         // logs --offset
  std::string signal = "TERM";           // kill -s
  int port = 0;                          // port-forward: the sandbox's port
  std::optional<int> local_port;         // port-forward: where to listen (default: port)
};

// The default sandbox lifetime and command timeout of `bulkhead run`.
inline constexpr int64_t kRunDefaultTimeoutS = 300;

// Declares every subcommand and flag of `app`, storing parsed values in `line`, which
// must outlive `app`. Environment defaults (BULKHEAD_URL, BULKHEAD_STATE,
// BULKHEAD_LISTEN) are applied by CLI11 while parsing.
void DefineCommandLine(CLI::App& app, CommandLine& line);

// Prints CLI11's message (help, or the error with a hint) and returns the exit code:
// 0 for --help/--version, 2 for usage errors.
int ExitForParseError(CLI::App& app, const CLI::ParseError& error);

// `bulkhead serve`'s configuration: flags over environment over built-in defaults.
core::DaemonConfig DaemonConfigFromCommandLine(const CommandLine& line);
// The E2B front's address when --e2b-listen is not given: the API's host, its port + 1 (port 0
// stays 0); "" when the API has no TCP address.
std::string DefaultE2bListen(const std::string& listen);

// A --warm-pool entry: "N" (every runtime's host-image pool), "RUNTIME=N", "IMAGE=N" (on the
// default runtime: runtime ""), "IMAGE@RUNTIME=N".
struct WarmPoolEntry {
  std::string runtime;
  std::string image;  // "" = the host image's pools
  int count = 0;
};
Result<WarmPoolEntry> ParseWarmPool(const std::string& text);

// "K=V" -> {K, V}. Without '=' the value is looked up in this process's environment when
// `allow_from_environment` (like `docker run -e K`); a missing key is an error.
Result<std::pair<std::string, std::optional<std::string>>> ParseKeyValue(const std::string& text,
                                                                          bool allow_from_environment);

// Where and how a client command talks to the daemon.
struct ClientSettings {
  ServerAddress address;
  std::string api_key;  // empty = none found; the daemon then answers 401
  std::string api_key_source;  // for messages: "BULKHEAD_API_KEY" or the key file's path
};

// --url (or the state dir's socket) and the key from BULKHEAD_API_KEY or <state dir>/api-key.
Result<ClientSettings> ResolveClientSettings(const CommandLine& line);

}  // namespace bulkhead::cli
