#include "cli/commands.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "cli/audit_commands.h"
#include "cli/file_commands.h"
#include "cli/build_command.h"
#include "cli/image_commands.h"
#include "cli/network_commands.h"
#include "cli/output_format.h"
#include "cli/port_forward.h"
#include "cli/process_commands.h"
#include "cli/run_interrupt.h"
#include "cli/session.h"
#include "cli/shell_command.h"
#include "cli/local_files.h"
#include "cli/snapshot_commands.h"
#include "cli/tenant_commands.h"
#include "cli/volume_commands.h"
#include "client/api_client.h"
#include "client/exec_stream.h"
#include "common/base64.h"
#include "common/read_file.h"
#include "common/tls_relay.h"
#include "common/unique_fd.h"
#include "mcp/server.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

// `run` gives its sandbox this much more life than its command, so the command's own
// timeout fires first and reports timed_out (exit 124); the sandbox is removed right after.
constexpr int64_t kRunLifetimeMarginS = 30;

// -e/--env and --metadata lists as a JSON object.
Result<json> KeyValueObject(const std::vector<std::string>& items, bool allow_from_environment) {
  json object = json::object();
  for (const std::string& item : items) {
    auto parsed = ParseKeyValue(item, allow_from_environment);
    if (!parsed.ok()) return parsed.error();
    if (parsed->second) object[parsed->first] = *parsed->second;  // `-e K` with K unset: skipped
  }
  return object;
}

// The body of POST /v1/sandboxes; unset flags are left to the daemon.
Result<json> SandboxRequest(const SandboxFlags& flags, std::optional<int64_t> lifetime_s) {
  json request = json::object();
  if (flags.image) request["image"] = *flags.image;
  if (flags.runtime) request["runtime"] = *flags.runtime;
  if (flags.cpus) request["cpus"] = *flags.cpus;
  if (flags.memory_mb) request["memory_mb"] = *flags.memory_mb;
  if (flags.disk_mb) request["disk_mb"] = *flags.disk_mb;
  if (flags.pids) request["pids"] = *flags.pids;
  if (lifetime_s) request["timeout_s"] = *lifetime_s;
  if (flags.workdir) request["workdir"] = *flags.workdir;
  if (flags.user) request["user"] = *flags.user;
  if (!flags.network && flags.allow.empty() && !flags.deny.empty()) {
    return MakeError(ErrorCode::kBadRequest, "--deny needs --network allowlist or open, or --allow",
                     "invalid_argument");
  }
  if (flags.network || !flags.allow.empty()) {
    request["network"] = {
        {"mode", flags.network.value_or("allowlist")}, {"allow", flags.allow}, {"deny", flags.deny}};
  }
  if (!flags.env.empty()) {
    auto env = KeyValueObject(flags.env, /*allow_from_environment=*/true);
    if (!env.ok()) return env.error();
    request["env"] = *env;
  }
  if (!flags.metadata.empty()) {
    auto metadata = KeyValueObject(flags.metadata, /*allow_from_environment=*/false);
    if (!metadata.ok()) return metadata.error();
    request["metadata"] = *metadata;
  }
  if (flags.private_preview) request["preview"] = {{"public", false}};
  if (flags.from_snapshot) request["from_snapshot"] = *flags.from_snapshot;
  if (!flags.volumes.empty()) {
    json volumes = json::array();
    for (const std::string& text : flags.volumes) {
      auto mount = ParseVolumeFlag(text);
      if (!mount.ok()) return mount.error();
      volumes.push_back(*mount);
    }
    request["volumes"] = std::move(volumes);
  }
  return request;
}

Result<std::string> ReadAll(int fd) {
  std::string data;
  char buffer[64 << 10];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("reading stdin", errno);
    }
    if (n == 0) return data;
    data.append(buffer, static_cast<size_t>(n));
  }
}

// The body of POST .../exec. `stdin_data` is sent as stdin_b64 since it may be any bytes.
json ExecRequest(const std::vector<std::string>& argv, const json& env, const std::optional<std::string>& cwd,
                 const std::optional<std::string>& user, std::optional<int64_t> timeout_s,
                 const std::optional<std::string>& stdin_data) {
  json request = json::object();
  request["cmd"] = argv;  // always argv: one word with spaces stays one word
  if (!env.empty()) request["env"] = env;
  if (cwd) request["cwd"] = *cwd;
  if (user) request["user"] = *user;
  if (timeout_s) request["timeout_s"] = *timeout_s;
  if (stdin_data) request["stdin_b64"] = Base64Encode(*stdin_data);
  return request;
}

// Streams a command's output to the terminal; the command's exit code, or ours on error.
int StreamExec(const Session& session, const std::string& sandbox_id, const json& request,
               std::optional<Error>* failure) {
  ExecOutputPrinter printer(OutputFds{session.io.stdout_fd, session.io.stderr_fd});
  Result<CommandOutcome> outcome = session.api.Exec(sandbox_id, request, printer);
  if (!outcome.ok()) {
    *failure = outcome.error();
    return IsOutputClosed(outcome.error()) ? kExitOutputClosed : kExitError;
  }
  return ShellExitCode(*outcome);
}

Result<std::optional<std::string>> StdinIfWanted(const Session& session) {
  if (!session.line.exec.forward_stdin) return std::optional<std::string>();
  auto data = ReadAll(session.io.stdin_fd);
  if (!data.ok()) return data.error();
  return std::optional<std::string>(std::move(*data));
}

int RunCommand(Session& session) {
  const CommandLine& line = session.line;
  int64_t timeout_s = line.sandbox.timeout_s.value_or(kRunDefaultTimeoutS);
  auto sandbox_request = SandboxRequest(line.sandbox, timeout_s == 0 ? 0 : timeout_s + kRunLifetimeMarginS);
  if (!sandbox_request.ok()) return session.UsageError(sandbox_request.error());
  // Read stdin before creating the sandbox, so it does not sit idle while we wait for input.
  auto stdin_data = StdinIfWanted(session);
  if (!stdin_data.ok()) return session.Fail(stdin_data.error());
  const ApiClient& api = session.api;
  // No command: what the image's config says to run (its Entrypoint, then its Cmd), as `docker run`.
  std::vector<std::string> argv = line.exec.argv;
  if (argv.empty()) {
    const std::string image = line.sandbox.image.value_or("host");
    auto config = api.Call(HttpMethod::kGet, "/v1/images/" + PercentEncode(image));
    if (config.ok() && config->is_object() && config->contains("config")) {
      for (const char* part : {"entrypoint", "cmd"})
        for (const json& arg : (*config)["config"].value(part, json::array()))
          if (arg.is_string()) argv.push_back(arg.get<std::string>());
    }
    if (argv.empty()) return session.UsageError("no command given, and image " + image + " names none to run");
  }

  RunInterruptGuard guard([&api, &session](const std::string& id) {
    auto removed = api.Call(HttpMethod::kDelete, SandboxPath(id));
    if (!removed.ok() && removed.error().code != ErrorCode::kNotFound) {
      session.Err("bulkhead: could not remove sandbox " + id + ": " + removed.error().message + " (" +
                  CodeOf(removed.error()) + ")\n");
    }
  });
  if (session.io.handle_interrupts) {
    if (Status started = guard.Start(); !started.ok()) return session.Fail(started.error());
  }

  auto sandbox = api.Call(HttpMethod::kPost, "/v1/sandboxes", *sandbox_request);
  if (!sandbox.ok()) return session.Fail(sandbox.error());
  if (!sandbox->is_object() || !(*sandbox)["id"].is_string()) {
    return session.Fail(MakeError(ErrorCode::kInternal, "the daemon's answer has no sandbox id", "bad_response"));
  }
  std::string id = (*sandbox)["id"].get<std::string>();
  if (auto interrupted = guard.SandboxCreated(id)) return *interrupted;

  json request = ExecRequest(argv, json::object(), std::nullopt, std::nullopt, timeout_s, *stdin_data);
  std::optional<Error> failure;
  int exit_code = StreamExec(session, id, request, &failure);
  guard.RemoveSandbox();
  if (failure && !IsOutputClosed(*failure)) session.Fail(*failure);
  return exit_code;
}

int ExecCommand(Session& session) {
  const ExecFlags& flags = session.line.exec;
  auto env = KeyValueObject(flags.env, /*allow_from_environment=*/true);
  if (!env.ok()) return session.UsageError(env.error());
  if (session.line.tag && !session.line.detach) return session.UsageError("--tag names a background process: add -d");
  if (session.line.detach && flags.forward_stdin) {
    return session.UsageError("-i cannot be combined with -d: a background process reads no terminal");
  }
  auto stdin_data = StdinIfWanted(session);
  if (!stdin_data.ok()) return session.Fail(stdin_data.error());
  json request = ExecRequest(flags.argv, *env, flags.cwd, flags.user, flags.timeout_s, *stdin_data);
  if (session.line.detach) return DetachedExecCommand(session, request);
  std::optional<Error> failure;
  int exit_code = StreamExec(session, session.line.sandbox_id, request, &failure);
  if (failure && !IsOutputClosed(*failure)) session.Fail(*failure);
  return exit_code;
}

int CreateCommand(Session& session) {
  auto request = SandboxRequest(session.line.sandbox, session.line.sandbox.timeout_s);
  if (!request.ok()) return session.UsageError(request.error());
  auto sandbox = session.api.Call(HttpMethod::kPost, "/v1/sandboxes", *request);
  if (!sandbox.ok()) return session.Fail(sandbox.error());
  if (session.line.json) {
    session.Out(DumpJson(*sandbox, 2) + "\n");
  } else {
    session.Out(StringField(*sandbox, "id") + "\n");
  }
  return 0;
}

int ListCommand(Session& session) {
  if (!session.line.sandbox_id.empty()) return FileListCommand(session);
  std::string query;
  auto add_query = [&query](const std::string& key, const std::string& value) {
    query += (query.empty() ? "?" : "&") + PercentEncode(key) + "=" + PercentEncode(value);
  };
  if (session.line.state_filter) add_query("state", *session.line.state_filter);
  for (const std::string& item : session.line.metadata_filter) {
    auto parsed = ParseKeyValue(item, /*allow_from_environment=*/false);
    if (!parsed.ok()) return session.UsageError(parsed.error());
    add_query("metadata." + parsed->first, parsed->second.value_or(""));
  }
  auto listing = session.api.Call(HttpMethod::kGet, "/v1/sandboxes" + query);
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows = {{"ID", "STATE", "IMAGE", "CREATED", "EXPIRES"}};
  if (auto sandboxes = listing->find("sandboxes"); sandboxes != listing->end() && sandboxes->is_array()) {
    for (const json& sandbox : *sandboxes) {
      rows.push_back({StringField(sandbox, "id"), StringField(sandbox, "state"), StringField(sandbox, "image"),
                      DescribeCreated(StringField(sandbox, "created_at"), now),
                      DescribeExpiry(StringField(sandbox, "expires_at"), now)});
    }
  }
  session.Out(FormatTable(rows));
  return 0;
}

int InspectCommand(Session& session) {
  auto sandbox = session.api.Call(HttpMethod::kGet, SandboxPath(session.line.sandbox_id));
  if (!sandbox.ok()) return session.Fail(sandbox.error());
  session.Out(DumpJson(*sandbox, 2) + "\n");
  return 0;
}

int RemoveCommand(Session& session) {
  int exit_code = 0;
  for (const std::string& id : session.line.sandbox_ids) {
    auto removed = session.api.Call(HttpMethod::kDelete, SandboxPath(id));
    if (removed.ok()) {
      session.Out(id + "\n");
    } else {
      Error error = removed.error();
      error.message = id + ": " + error.message;
      exit_code = session.Fail(error);
    }
  }
  return exit_code;
}

// pause | resume | stop | start ID...: prints "ID STATE" for each.
int LifecycleCommand(Session& session) {
  int exit_code = 0;
  for (const std::string& id : session.line.sandbox_ids) {
    const json body = session.line.to_disk ? json{{"to_disk", true}} : json::object();
    auto sandbox = session.api.Call(HttpMethod::kPost, SandboxPath(id) + "/" + session.line.lifecycle_action, body);
    if (sandbox.ok()) {
      session.Out(id + " " + StringField(*sandbox, "state") + "\n");
    } else {
      Error error = sandbox.error();
      error.message = id + ": " + error.message;
      exit_code = session.Fail(error);
    }
  }
  return exit_code;
}

int VersionCommand(Session& session) {
  session.Out(std::string("client: bulkhead ") + BULKHEAD_VERSION + "\n");
  std::string url = session.api.http().address().ToUrl();
  auto health = session.api.Call(HttpMethod::kGet, "/healthz");
  if (health.ok() && health->is_object()) {
    session.Out("daemon: bulkhead " + StringField(*health, "version") + " at " + url + "\n");
  } else {
    session.Out("daemon: " + (health.ok() ? "unexpected /healthz answer from " + url : health.error().message) +
                "\n");
  }
  return 0;
}

// The three variables that point the unmodified e2b SDKs at this daemon's E2B front.
int E2bEnvCommand(Session& session) {
  auto health = session.api.Call(HttpMethod::kGet, "/healthz");
  if (!health.ok()) return session.Fail(health.error());
  const std::string address = health->is_object() ? StringField(*health, "e2b_address") : "";
  if (address.empty()) {
    return session.Fail(MakeError(ErrorCode::kNotFound, "the daemon serves no E2B front (see serve --e2b-listen)"));
  }
  const std::string key_path = session.line.state_dir + "/e2b-api-key";
  std::optional<std::string> key = ReadSmallFile(key_path, 4096);
  if (!key || key->empty()) {
    return session.Fail(MakeError(ErrorCode::kNotFound, "cannot read the E2B key in " + key_path +
                                                            " (run as the daemon's user, or give --state-dir)"));
  }
  std::string text = *key;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const std::string url = "http://" + address;
  session.Out("export E2B_API_URL=" + url + "\nexport E2B_SANDBOX_URL=" + url + "\nexport E2B_API_KEY=" + text + "\n");
  return 0;
}

int RunSessionCommand(const CommandLine& line, const CommandIo& io) {
  try {
    auto settings = ResolveClientSettings(line);
    if (!settings.ok()) {
      (void)WriteAll(io.stderr_fd, "bulkhead: " + settings.error().message + " (" + CodeOf(settings.error()) + ")\n");
      return kExitUsage;
    }
    Session session(line, io,
                    ApiClient(HttpClient(settings->address, settings->api_key), settings->api_key_source));
    switch (line.command) {
      case Command::kRun: return RunCommand(session);
      case Command::kExec: return ExecCommand(session);
      case Command::kCreate: return CreateCommand(session);
      case Command::kList: return ListCommand(session);
      case Command::kInspect: return InspectCommand(session);
      case Command::kRemove: return RemoveCommand(session);
      case Command::kImageImport: return ImageImportCommand(session);
      case Command::kImageList: return ImageListCommand(session);
      case Command::kImageRemove: return ImageRemoveCommand(session);
      case Command::kImagePull: return ImagePullCommand(session);
      case Command::kImageInspect: return ImageInspectCommand(session);
      case Command::kImagePush: return ImagePushCommand(session);
      case Command::kBuild: return BuildCommand(session);
      case Command::kImagePruneCache: return PruneBuildCacheCommand(session);
      case Command::kVersion: return VersionCommand(session);
      case Command::kCopy: return CopyCommand(session);
      case Command::kWatch: return WatchCommand(session);
      case Command::kShell: return ShellCommand(session);
      case Command::kProcessList: return ProcessListCommand(session);
      case Command::kLogs: return LogsCommand(session);
      case Command::kKill: return KillCommand(session);
      case Command::kPortForward: return PortForwardCommand(session);
      case Command::kNetwork: return NetworkCommand(session);
      case Command::kEgress: return EgressCommand(session);
      case Command::kLifecycle: return LifecycleCommand(session);
      case Command::kVolumeCreate: return VolumeCreateCommand(session);
      case Command::kVolumeList: return VolumeListCommand(session);
      case Command::kVolumeRemove: return VolumeRemoveCommand(session);
      case Command::kSnapshotCreate: return SnapshotCreateCommand(session);
      case Command::kSnapshotList: return SnapshotListCommand(session);
      case Command::kSnapshotRemove: return SnapshotRemoveCommand(session);
      case Command::kSnapshotExport: return SnapshotExportCommand(session);
      case Command::kSnapshotImport: return SnapshotImportCommand(session);
      case Command::kFork: return ForkCommand(session);
      case Command::kE2bEnv: return E2bEnvCommand(session);
      case Command::kAuditVerify: return AuditVerifyCommand(session);
      case Command::kAuditExport: return AuditExportCommand(session);
      case Command::kTenantCreate: return TenantCreateCommand(session);
      case Command::kTenantList: return TenantListCommand(session);
      case Command::kTenantRemove: return TenantRemoveCommand(session);
      case Command::kTenantShow: return TenantShowCommand(session);
      case Command::kTenantQuota: return TenantQuotaCommand(session);
      case Command::kTenantEgress: return TenantEgressCommand(session);
      case Command::kKeyCreate: return KeyCreateCommand(session);
      case Command::kKeyList: return KeyListCommand(session);
      case Command::kKeyRevoke: return KeyRevokeCommand(session);
      case Command::kMcp: return mcp::ServeMcp(session.api, {io.stdin_fd, io.stdout_fd});
      case Command::kServe:
      case Command::kNone: break;
    }
    (void)WriteAll(io.stderr_fd, "bulkhead: no client command given (usage)\n");
    return kExitUsage;
  } catch (const std::exception& e) {  // a bug; still end with a message, not a crash
    (void)WriteAll(io.stderr_fd, std::string("bulkhead: ") + e.what() + " (internal)\n");
    return kExitError;
  }
}

}  // namespace

int RunClientCommand(const CommandLine& line, const CommandIo& io) {
  const int code = RunSessionCommand(line, io);  // its connections are closed when it returns
  TlsEndpoint::FinishBlockingRelays(std::chrono::seconds(3));
  return code;
}

}  // namespace bulkhead::cli
