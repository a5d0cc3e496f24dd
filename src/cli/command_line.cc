#include "cli/command_line.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/host_limits.h"
#include "runtime/uid_ranges.h"
#include "storage/fs_util.h"
#include "storage/image_ref.h"

namespace bulkhead::cli {
namespace {

void AddSandboxFlags(CLI::App* sub, SandboxFlags& flags, bool for_run) {
  sub->add_option("--image", flags.image, "Image or template to start from (default: host)");
  sub->add_option("--runtime", flags.runtime, "Isolation tier: native | gvisor | microvm");
  sub->add_option("--cpus", flags.cpus, "CPU limit, in CPUs (e.g. 0.5)")->check(CLI::PositiveNumber);
  sub->add_option("--memory-mb", flags.memory_mb, "Memory limit in MiB, swap included")
      ->check(CLI::PositiveNumber);
  sub->add_option("--disk-mb", flags.disk_mb, "Writable disk quota in MiB")->check(CLI::PositiveNumber);
  sub->add_option("--pids", flags.pids, "Maximum number of processes")->check(CLI::PositiveNumber);
  sub->add_option("--timeout", flags.timeout_s,
                  for_run ? "Seconds until the command is killed and the sandbox removed; 0 = no limit "
                            "(default 300)"
                          : "Sandbox lifetime in seconds; 0 = none (default: the daemon's)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-e,--env", flags.env, "Environment variable K=V (K alone: take it from here); repeatable")
      ->allow_extra_args(false);
  sub->add_option("--workdir", flags.workdir, "Working directory (default /workspace)");
  sub->add_option("--user", flags.user, "User that commands run as (default root)");
  sub->add_option("--network", flags.network, "Egress: none (default), allowlist or open")
      ->check(CLI::IsMember({"none", "allowlist", "open"}));
  sub->add_option("--allow", flags.allow,
                  "A destination the sandbox may reach (example.com, *.example.com, 1.2.3.4, 10.0.0.0/8, "
                  "each optionally :PORT); repeatable; implies --network allowlist")
      ->allow_extra_args(false);
  sub->add_option("--deny", flags.deny,
                  "A destination the sandbox may not reach, whatever --allow says (as --allow); repeatable; "
                  "needs --network allowlist or open, or --allow")
      ->allow_extra_args(false);
  sub->add_option("-v,--volume", flags.volumes,
                  "Mount a named volume: NAME:/PATH, or NAME:/PATH:ro for read-only; repeatable")
      ->allow_extra_args(false);
  sub->add_option("--from-snapshot", flags.from_snapshot,
                  "Start from a snapshot's files (and from a memory snapshot, with its processes running)");
}

CLI::Validator WarmPoolValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto pool = ParseWarmPool(text);
        return pool ? "" : pool.error().message;
      },
      "N|RUNTIME=N|IMAGE[@RUNTIME]=N");
}

// Records which subcommand was chosen; CLI11 calls this once the subcommand parsed.
void Selects(CLI::App* sub, CommandLine& line, Command command) {
  sub->callback([&line, command] { line.command = command; });
}

const char* kCommandFooter =
    "Put -- before the command when it has options of its own: bulkhead run -- ls -la.\n"
    "The command is passed as argv, not through a shell: use -- sh -c '...' for one.";

}  // namespace

void DefineCommandLine(CLI::App& app, CommandLine& line) {
  app.description("bulkhead: self-hosted sandboxes for AI coding agents");
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  app.set_version_flag("--version", std::string("bulkhead ") + BULKHEAD_VERSION);
  app.add_option("--url", line.url,
                 "Daemon address: unix:///path/to/bulkhead.sock, http://HOST:PORT or https://HOST:PORT "
                 "(default: unix://<state dir>/bulkhead.sock)")
      ->envname("BULKHEAD_URL");
  app.add_option("--ca-cert", line.ca_cert,
                 "PEM file of the authority an https:// daemon's certificate is checked against "
                 "(default: the system's)")
      ->envname("BULKHEAD_CA_CERT");
  app.add_option("--state-dir", line.state_dir, "The daemon's state directory")
      ->envname("BULKHEAD_STATE")
      ->capture_default_str();

  CLI::App* serve = app.add_subcommand("serve", "Run the daemon");
  serve->add_option("--listen", line.listen,
                    "TCP address to listen on as well as the unix socket; \"\" = unix socket only "
                    "(default 127.0.0.1:7420)")
      ->envname("BULKHEAD_LISTEN");
  serve->add_option("--warm-pool", line.warm_pools,
                    "Ready sandboxes kept in advance: of the host image, N for every runtime, RUNTIME=N for "
                    "one (default 4, gvisor=2, microvm=1; the default runtime's pool and named ones fill at start, "
                    "another runtime's from its first create); of another image, IMAGE=N on the default runtime or "
                    "IMAGE@RUNTIME=N (a local name or a registry reference, pulled at start if missing). Repeatable")
      ->check(WarmPoolValidator())
      ->allow_extra_args(false);
  serve->add_option("--default-runtime", line.default_runtime,
                    "Isolation tier of sandboxes whose create names none (default native)")
      ->check(CLI::IsMember({"native", "gvisor", "microvm"}));
  serve->add_option("--runsc", line.runsc,
                    "The runsc binary of the gvisor runtime (default: the pinned build in "
                    "/usr/local/lib/bulkhead, else runsc on the PATH)");
  serve->add_option("--idle-pause", line.idle_pause,
                    "How a sandbox is paused at its timeout (on_timeout pause) or idle timeout: memory (frozen in "
                    "RAM, the default) or disk (its memory written to disk, no RAM held, where its runtime can: gvisor, microvm)")
      ->check(CLI::IsMember({"memory", "disk"}));
  serve->add_flag("--no-microvm-templates", line.no_microvm_templates,
                  "Boot every microvm sandbox's guest instead of restoring a saved template guest of its shape");
  serve->add_flag("--no-microvm-memory-snapshots,!--microvm-memory-snapshots", line.no_microvm_memory_snapshots,
                  "Refuse memory snapshots, forks with memory and pauses to disk of microvm sandboxes (taken by "
                  "default where QEMU is 8.2 or newer and guests start from templates)");
  serve->add_option("--io-threads", line.io_threads,
                    "Threads serving HTTP (default " + std::to_string(core::DaemonConfig{}.io_threads) + ")")
      ->check(CLI::Range(1, 256));
  serve->add_option("--blocking-threads", line.blocking_threads,
                    "Threads creating, deleting and snapshotting sandboxes (default " +
                        std::to_string(core::DaemonConfig{}.blocking_threads) + ")")
      ->check(CLI::Range(1, 256));
  serve->add_option("--output-rate", line.output_rate_mib,
                    "MiB/s of one sandbox's command output the daemon relays, over all its execs and "
                    "followers; 0 = no cap (default " +
                        std::to_string(core::DaemonConfig{}.output_rate_mib) + ")")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  serve->add_option("--max-sandboxes", line.max_sandboxes,
                    "Sandboxes the daemon holds at once (warm pools aside); more are refused with 429 "
                    "(default: a quarter of the host's memory in MiB, here " +
                        std::to_string(core::DefaultMaxSandboxes(core::HostMemoryMib())) + ")")
      ->check(CLI::Range(int64_t{1}, int64_t{runtime::kSlots}));
  serve->add_option("--audit-keep-days", line.audit_keep_days,
                    "Days the audit log keeps a record (<state dir>/audit.log); older ones are removed hourly, "
                    "the removal itself recorded in the chain. 0 = keep every record (the default)")
      ->check(CLI::Range(int64_t{0}, int64_t{36500}));
  serve->add_option("--egress-keep-days", line.egress_keep_days,
                    "Days a sandbox's egress records are kept (removed hourly; all go with the sandbox). "
                    "0 = as long as the sandbox (the default)")
      ->check(CLI::Range(int64_t{0}, int64_t{36500}));
  serve->add_option("--tls-cert", line.tls_cert,
                    "PEM certificate chain: every TCP listener (the API's, the E2B front's) speaks TLS 1.2+ only; "
                    "the unix socket stays plain (root-only)");
  serve->add_option("--tls-key", line.tls_key, "PEM private key of --tls-cert (keep it 0600)");
  serve->add_option("--dns-server", line.dns_servers,
                    "Upstream DNS server (IP or IP:PORT) for sandboxes with network access; repeatable "
                    "(default: the host's /etc/resolv.conf)")
      ->allow_extra_args(false);
  serve->add_option("--preview-domain", line.preview_domain,
                    "Host names PORT-ID.DOMAIN reach a sandbox's ports (default localhost:7420)");
  serve->add_option("--e2b-listen", line.e2b_listen,
                    "TCP address of the E2B-compatible front (E2B_API_URL and E2B_SANDBOX_URL); \"\" = none "
                    "(default: the --listen host, its port + 1: 127.0.0.1:7421)");
  serve->add_option("--e2b-domain", line.e2b_domain,
                    "Host names PORT-ID.DOMAIN sent to the E2B front reach a sandbox's ports (E2B's getHost) "
                    "(default: its address, with localhost for a loopback or wildcard one: localhost:7421)");
  serve->add_option("--open-subnet", line.open_subnet,
                    "IPv4 prefix whose /30s give open-mode sandboxes their link for UDP and ICMP "
                    "(default 10.213.0.0/16)");
  serve->add_option("--storage-driver", line.storage_driver,
                    "Layers and snapshots: overlay (file copies, reflinked on xfs) or btrfs (subvolume "
                    "snapshots, in a btrfs image the daemon makes); default: what this machine gives")
      ->check(CLI::IsMember({"overlay", "btrfs"}));
  serve->add_option("--default-registry", line.default_registry,
                    "Registry (HOST[:PORT]) of image names that name none, like team/py:3.12; default: none, such "
                    "names must be stored images");
  serve->add_option("--insecure-registry", line.insecure_registries,
                    "Registry (HOST[:PORT]) spoken to in plain HTTP, without TLS; repeatable")
      ->allow_extra_args(false);
  serve->add_option("--registry-auth", line.registry_auth,
                    "Registry logins in Docker's config.json format ({\"auths\": {\"HOST\": {\"auth\": base64(user:password)}}})")
      ->check(CLI::ExistingFile);
  serve->add_option("--registry-ca", line.registry_ca,
                    "CA certificates (PEM) trusted for registries beside the system's")
      ->check(CLI::ExistingFile);
  Selects(serve, line, Command::kServe);

  CLI::App* run = app.add_subcommand("run", "Run one command in a new sandbox, then remove it");
  AddSandboxFlags(run, line.sandbox, /*for_run=*/true);
  run->add_flag("-i,--stdin", line.exec.forward_stdin, "Send this command's stdin to the command");
  run->add_option("command", line.exec.argv, "The command and its arguments (default: the image's entrypoint and cmd)");
  run->footer(kCommandFooter);
  Selects(run, line, Command::kRun);

  CLI::App* create = app.add_subcommand("create", "Create a sandbox and print its id");
  AddSandboxFlags(create, line.sandbox, /*for_run=*/false);
  create->add_option("--metadata", line.sandbox.metadata, "Label k=v; repeatable")->allow_extra_args(false);
  create->add_flag("--private-preview", line.sandbox.private_preview,
                   "Preview host names ({port}-{id}.{preview domain}) need the sandbox's preview token "
                   "(shown by inspect), not only its id");
  create->add_flag("--json", line.json, "Print the whole sandbox object");
  Selects(create, line, Command::kCreate);

  CLI::App* exec = app.add_subcommand("exec", "Run a command in an existing sandbox");
  exec->add_option("id", line.sandbox_id, "Sandbox id")->required();
  exec->add_option("-e,--env", line.exec.env, "Environment variable K=V (K alone: take it from here); repeatable")
      ->allow_extra_args(false);
  exec->add_option("--cwd", line.exec.cwd, "Working directory (default: the sandbox's)");
  exec->add_option("--user", line.exec.user, "User to run as (default: the sandbox's)");
  exec->add_option("--timeout", line.exec.timeout_s, "Kill the command after this many seconds; 0 = no limit")
      ->check(CLI::NonNegativeNumber);
  exec->add_flag("-i,--stdin", line.exec.forward_stdin, "Send this command's stdin to the command");
  exec->add_flag("-d,--detach", line.detach,
                 "Start the command in the background and print its pid; see ps, logs, kill");
  exec->add_option("--tag", line.tag, "With -d: a name for the process, usable instead of its pid");
  exec->add_option("command", line.exec.argv, "The command and its arguments")->required();
  exec->footer(std::string(kCommandFooter) +
               "\nWith -d the command keeps running after bulkhead returns; its output is kept:\n"
               "  bulkhead exec -d --tag web ID -- python3 -m http.server 8000\n"
               "  bulkhead logs -f ID web");
  Selects(exec, line, Command::kExec);

  CLI::App* list = app.add_subcommand("ls", "List sandboxes; with an ID, list files in that sandbox");
  list->alias("list");
  list->add_option("id", line.sandbox_id, "Sandbox id: list its files instead of the sandboxes");
  list->add_option("path", line.path, "Directory or file in the sandbox (default: its workdir)");
  list->add_option("-d,--depth", line.depth, "With ID: levels of subdirectories to list (1..32, default 1)")
      ->check(CLI::Range(1, 32));
  list->add_flag("--json", line.json, "Print the API's JSON");
  list->add_option("--state", line.state_filter, "Only sandboxes in this state (running, paused, ...)");
  list->add_option("--metadata", line.metadata_filter, "Only sandboxes labelled k=v; repeatable")
      ->allow_extra_args(false);
  Selects(list, line, Command::kList);

  CLI::App* copy = app.add_subcommand("cp", "Copy files and directories between this machine and a sandbox");
  copy->add_option("source", line.copy_source, "ID:PATH, a local path, or - for stdin")->required();
  copy->add_option("destination", line.copy_destination, "ID:PATH, a local path, or - for stdout")->required();
  copy->footer(
      "Like docker cp: one side is ID:PATH (relative paths start at the sandbox's workdir).\n"
      "A destination that is an existing directory receives the source under its own name;\n"
      "otherwise the source is copied to the destination path. SOURCE/. copies a directory's\n"
      "contents. - reads a file's content from stdin or writes it to stdout (a directory as tar).\n"
      "Symlinks inside a directory are copied as symlinks. Copied out of a sandbox, files never\n"
      "keep setuid/setgid bits or the sandbox's owners; symlinks leading out of the destination,\n"
      "devices and fifos are refused (the rest is copied, then cp fails). Examples:\n"
      "  bulkhead cp ./src ID:/workspace/\n"
      "  bulkhead cp ID:/workspace/out.txt .\n"
      "  echo hi | bulkhead cp - ID:/workspace/hi.txt");
  Selects(copy, line, Command::kCopy);

  CLI::App* watch = app.add_subcommand("watch", "Print file changes in a sandbox as they happen (Ctrl-C stops)");
  watch->add_option("id", line.sandbox_id, "Sandbox id")->required();
  watch->add_option("path", line.path, "Directory to watch (default: the workdir)");
  watch->add_flag("--no-recursive", line.no_recursive, "Only the directory itself, not its subdirectories");
  watch->add_flag("--json", line.json, "Print each event as the API's JSON line");
  Selects(watch, line, Command::kWatch);

  CLI::App* shell = app.add_subcommand("shell", "Open an interactive terminal in a sandbox");
  shell->add_option("id", line.sandbox_id, "Sandbox id")->required();
  shell->add_option("--cmd", line.shell_command, "Command line to run on the terminal (default: bash, else sh)");
  shell->add_option("-e,--env", line.exec.env, "Environment variable K=V (K alone: take it from here); repeatable")
      ->allow_extra_args(false);
  shell->add_option("--cwd", line.exec.cwd, "Working directory (default: the sandbox's)");
  shell->add_option("--user", line.exec.user, "User to run as (default: the sandbox's)");
  shell->footer("Exits with the shell's exit code. The shell runs on a pseudo-terminal sized like this one.");
  Selects(shell, line, Command::kShell);

  CLI::App* processes = app.add_subcommand("ps", "List a sandbox's background processes");
  processes->add_option("id", line.sandbox_id, "Sandbox id")->required();
  processes->add_flag("--json", line.json, "Print the API's JSON");
  Selects(processes, line, Command::kProcessList);

  CLI::App* logs = app.add_subcommand("logs", "Print a background process's output");
  logs->add_option("id", line.sandbox_id, "Sandbox id")->required();
  logs->add_option("process", line.process, "The process's pid or tag")->required();
  logs->add_flag("-f,--follow", line.follow, "Keep printing new output until the process exits, then exit with its code");
  logs->add_option("--offset", line.offset, "Start at this byte of each stream (default 0: all that is kept)")
      ->check(CLI::NonNegativeNumber);
  Selects(logs, line, Command::kLogs);

  CLI::App* kill_process = app.add_subcommand("kill", "Send a signal to a background process");
  kill_process->add_option("id", line.sandbox_id, "Sandbox id")->required();
  kill_process->add_option("process", line.process, "The process's pid or tag")->required();
  kill_process->add_option("-s,--signal", line.signal, "Signal name or number (TERM, SIGKILL, 9...)")->capture_default_str();
  Selects(kill_process, line, Command::kKill);

  CLI::App* forward = app.add_subcommand("port-forward", "Forward a local TCP port to a port of a sandbox (Ctrl-C stops)");
  forward->add_option("id", line.sandbox_id, "Sandbox id")->required();
  forward->add_option("port", line.port, "The port in the sandbox (on its 127.0.0.1)")->required()->check(CLI::Range(1, 65535));
  forward->add_option("local_port", line.local_port, "The port to listen on at 127.0.0.1 (default: PORT; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  forward->footer(
      "Each connection to 127.0.0.1:LOCAL_PORT becomes a connection to the sandbox's 127.0.0.1:PORT:\n"
      "  bulkhead exec -d ID -- python3 -m http.server 8000\n"
      "  bulkhead port-forward ID 8000 &\n"
      "  curl http://127.0.0.1:8000/");
  Selects(forward, line, Command::kPortForward);

  CLI::App* network = app.add_subcommand("network", "Show or change a sandbox's egress policy");
  network->add_option("id", line.sandbox_id, "Sandbox id")->required();
  network->add_option("mode", line.network_mode, "none | allowlist | open (omit to show the policy)")
      ->check(CLI::IsMember({"none", "allowlist", "open"}));
  network->add_option("--allow", line.sandbox.allow,
                      "A destination (example.com, *.example.com, 1.2.3.4, 10.0.0.0/8, each optionally "
                      ":PORT); repeatable")
      ->allow_extra_args(false);
  network->add_option("--deny", line.sandbox.deny,
                      "A destination denied whatever --allow says (as --allow); repeatable")
      ->allow_extra_args(false);
  network->footer("Open connections the new policy no longer allows are cut at once.");
  Selects(network, line, Command::kNetwork);

  CLI::App* egress = app.add_subcommand("egress", "Show a sandbox's egress log (connections and DNS lookups)");
  egress->add_option("id", line.sandbox_id, "Sandbox id")->required();
  egress->add_option("--limit", line.egress_limit, "The last N records (default 1000)")->check(CLI::Range(1, 10000));
  egress->add_flag("--json", line.json, "Print the API's answer");
  Selects(egress, line, Command::kEgress);

  CLI::App* inspect = app.add_subcommand("inspect", "Show a sandbox as JSON");
  inspect->add_option("id", line.sandbox_id, "Sandbox id")->required();
  Selects(inspect, line, Command::kInspect);

  for (auto [action, what] : {std::pair{"pause", "Pause sandboxes (processes and memory kept, no CPU used)"},
                              std::pair{"resume", "Resume paused sandboxes"},
                              std::pair{"stop", "Stop sandboxes: end their processes, keep their files"},
                              std::pair{"start", "Start stopped sandboxes again on their files"}}) {
    CLI::App* lifecycle = app.add_subcommand(action, what);
    lifecycle->add_option("ids", line.sandbox_ids, "Sandbox ids")->required();
    if (std::string_view(action) == "pause")
      lifecycle->add_flag("--to-disk", line.to_disk,
                          "Write their memory and processes to disk and end them (no RAM held; gvisor, microvm): the next "
                          "call that needs one restores it");
    lifecycle->callback([&line, name = std::string(action)] {
      line.command = Command::kLifecycle;
      line.lifecycle_action = name;
    });
  }

  CLI::App* remove = app.add_subcommand("rm", "Remove sandboxes");
  remove->add_option("ids", line.sandbox_ids, "Sandbox ids")->required();
  Selects(remove, line, Command::kRemove);

  CLI::App* image = app.add_subcommand("image", "Manage images");
  image->require_subcommand(1);
  const char* kImageTenantHelp = "A tenant's images (with the host's key; a tenant's key acts on its own)";
  CLI::App* image_import = image->add_subcommand(
      "import", "Import an image from a directory (sent as a tar stream) or a tarball (any compression)");
  image_import->add_option("name", line.image_name, "Image name")->required();
  image_import->add_option("path", line.image_path, "Root filesystem directory or tarball")
      ->required()
      ->check(CLI::ExistingPath);
  image_import->add_option("--tenant", line.for_tenant, kImageTenantHelp);
  Selects(image_import, line, Command::kImageImport);
  CLI::App* image_list = image->add_subcommand("ls", "List images (with the host's key: every tenant's)");
  image_list->alias("list");
  image_list->add_flag("--json", line.json, "Print the API's JSON");
  image_list->add_option("--tenant", line.for_tenant, kImageTenantHelp);
  Selects(image_list, line, Command::kImageList);
  CLI::App* image_remove = image->add_subcommand("rm", "Remove an image, or a reference from its image");
  image_remove->add_option("name", line.image_name, "Image name or registry reference")->required();
  image_remove->add_option("--tenant", line.for_tenant, kImageTenantHelp);
  Selects(image_remove, line, Command::kImageRemove);
  CLI::App* image_pull = image->add_subcommand("pull", "Fetch an image from a registry (OCI distribution API)");
  image_pull->add_option("reference", line.image_name, "[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]")->required();
  image_pull->add_option("--platform", line.platform, "OS/ARCH[/VARIANT] to pick from a multi-platform image "
                                                      "(default: this machine's)");
  image_pull->add_flag("--json", line.json, "Print the API's NDJSON progress events");
  image_pull->add_option("--tenant", line.for_tenant, kImageTenantHelp);
  Selects(image_pull, line, Command::kImagePull);
  CLI::App* image_push = image->add_subcommand("push", "Write a stored image to a registry (OCI distribution API)");
  image_push->add_option("image", line.image_name, "Image name or the reference it was pulled as")->required();
  image_push->add_option("target", line.image_target, "REGISTRY/REPOSITORY[:TAG]")->required();
  image_push->add_flag("--json", line.json, "Print the API's NDJSON progress events");
  image_push->add_option("--tenant", line.for_tenant, kImageTenantHelp);
  Selects(image_push, line, Command::kImagePush);
  CLI::App* image_prune = image->add_subcommand("prune-cache", "Empty the build cache (built images stay)");
  Selects(image_prune, line, Command::kImagePruneCache);
  CLI::App* image_inspect = image->add_subcommand("inspect", "Show an image: digest, references, config, ports");
  image_inspect->add_option("name", line.image_name, "Image name or registry reference")->required();
  image_inspect->add_option("--tenant", line.for_tenant, kImageTenantHelp);
  Selects(image_inspect, line, Command::kImageInspect);

  CLI::App* build = app.add_subcommand("build", "Build an image from a Dockerfile, each step in a sandbox");
  build->add_option("context", line.build.context, "The build context: a directory")->required()->check(CLI::ExistingDirectory);
  build->add_option("-t,--tag", line.build.tag, "Name the image gets");
  build->add_option("-f,--file", line.build.dockerfile, "The Dockerfile, inside the context (default CONTEXT/Dockerfile)");
  build->add_option("--build-arg", line.build.build_args, "NAME=value for an ARG (repeatable)");
  build->add_option("--target", line.build.target, "The stage to build (default: the last)");
  build->add_option("--runtime", line.build.runtime, "Isolation tier the steps run in (default: the daemon's)")
      ->check(CLI::IsMember({"native", "gvisor", "microvm"}));
  build->add_flag("--no-cache", line.build.no_cache, "Run every step, whatever is cached");
  build->add_option("--pull", line.build.pull, "Base images from registries: missing (default), always, never")
      ->check(CLI::IsMember({"missing", "always", "never"}));
  build->add_option("--allow", line.build.allow,
                    "A destination RUN steps may reach (repeatable: host, *.domain, IP[/prefix][:port]); none by default");
  build->add_option("--network", line.build.network, "RUN steps' network: none, allowlist (with --allow) or open")
      ->check(CLI::IsMember({"none", "allowlist", "open"}));
  build->add_option("--cpus", line.build.cpus, "CPUs of each step's sandbox (default 2)")->check(CLI::PositiveNumber);
  build->add_option("--memory-mb", line.build.memory_mb, "Memory of each step's sandbox in MiB (default 2048)")
      ->check(CLI::PositiveNumber);
  build->add_option("--disk-mb", line.build.disk_mb, "Disk of each step's sandbox in MiB (default 10240)")
      ->check(CLI::PositiveNumber);
  build->add_option("--timeout", line.build.timeout_s,
                    "Seconds the whole build may take, 0 for no limit (default 3600)")
      ->check(CLI::NonNegativeNumber);
  build->add_flag("--json", line.json, "Print the API's NDJSON progress events");
  build->add_option("--tenant", line.for_tenant,
                    "Build as a tenant's (with the host's key): its image, cache, quotas and egress rules");
  Selects(build, line, Command::kBuild);

  CLI::App* volume = app.add_subcommand("volume", "Manage named volumes (shared between sandboxes, outliving them)");
  volume->require_subcommand(1);
  CLI::App* volume_create = volume->add_subcommand("create", "Create a named volume");
  volume_create->add_option("name", line.volume_names, "Volume name")->required()->expected(1);
  volume_create->add_option("--size-mb", line.volume_size_mb, "Size cap in MiB (default 1024)")
      ->check(CLI::Range(int64_t{1}, int64_t{1048576}));
  volume_create->add_flag("--json", line.json, "Print the API's JSON");
  const char* kVolumeTenantHelp = "A tenant's volumes (with the host's key; a tenant's key has its own alone)";
  volume_create->add_option("--tenant", line.for_tenant, kVolumeTenantHelp);
  Selects(volume_create, line, Command::kVolumeCreate);
  CLI::App* volume_list = volume->add_subcommand("ls", "List volumes (with the host's key: every tenant's)");
  volume_list->alias("list");
  volume_list->add_flag("--json", line.json, "Print the API's JSON");
  volume_list->add_option("--tenant", line.for_tenant, kVolumeTenantHelp);
  Selects(volume_list, line, Command::kVolumeList);
  CLI::App* volume_remove =
      volume->add_subcommand("rm", "Remove volumes and their data (refused while a sandbox lists one)");
  volume_remove->add_option("names", line.volume_names, "Volume names")->required();
  volume_remove->add_option("--tenant", line.for_tenant, kVolumeTenantHelp);
  Selects(volume_remove, line, Command::kVolumeRemove);

  CLI::App* snapshot = app.add_subcommand("snapshot", "Manage snapshots of sandboxes");
  snapshot->require_subcommand(1);
  CLI::App* snapshot_create = snapshot->add_subcommand("create", "Snapshot a sandbox and print the snapshot's id");
  snapshot_create->add_option("id", line.sandbox_id, "Sandbox id")->required();
  snapshot_create->add_option("--name", line.snapshot_name, "A name for it");
  snapshot_create->add_flag("--memory", line.memory,
                            "Keep its memory and running processes too (gvisor, microvm): a sandbox started from it "
                            "goes on running them");
  snapshot_create->add_flag("--json", line.json, "Print the API's JSON");
  Selects(snapshot_create, line, Command::kSnapshotCreate);
  CLI::App* snapshot_list = snapshot->add_subcommand("ls", "List snapshots");
  snapshot_list->alias("list");
  snapshot_list->add_flag("--json", line.json, "Print the API's JSON");
  Selects(snapshot_list, line, Command::kSnapshotList);
  CLI::App* snapshot_remove =
      snapshot->add_subcommand("rm", "Remove snapshots (refused while a sandbox started from one exists)");
  snapshot_remove->add_option("ids", line.snapshot_ids, "Snapshot ids")->required();
  Selects(snapshot_remove, line, Command::kSnapshotRemove);
  CLI::App* snapshot_export =
      snapshot->add_subcommand("export", "Write a snapshot (its files; a memory snapshot's memory image too) as a "
                                         "portable .tar.zst (for snapshot import)");
  snapshot_export->add_option("id", line.snapshot_id, "Snapshot id")->required();
  snapshot_export->add_option("file", line.archive_path, "Where to write it; - for stdout")->required();
  Selects(snapshot_export, line, Command::kSnapshotExport);
  CLI::App* snapshot_import =
      snapshot->add_subcommand("import", "Make a snapshot from an exported .tar.zst and print its id");
  snapshot_import->add_option("file", line.archive_path, "The archive; - for stdin")->required();
  snapshot_import->add_flag("--files-only", line.files_only,
                            "Leave a memory snapshot's memory image out (one this daemon's memory image key does "
                            "not vouch for is refused otherwise)");
  snapshot_import->add_flag("--json", line.json, "Print the API's JSON");
  Selects(snapshot_import, line, Command::kSnapshotImport);

  CLI::App* fork = app.add_subcommand("fork", "Copy a sandbox as it is now into new ones; print their ids");
  fork->add_option("id", line.sandbox_id, "Sandbox id")->required();
  fork->add_option("-n,--count", line.fork_count, "How many copies (1 to 16, default 1)")->check(CLI::Range(1, 16));
  fork->add_flag("--memory", line.memory, "Each copy goes on running the sandbox's processes (gvisor, microvm)");
  fork->add_flag("--json", line.json, "Print the API's JSON");
  Selects(fork, line, Command::kFork);

  CLI::App* mcp = app.add_subcommand("mcp", "Serve the Model Context Protocol on stdin/stdout (for AI agents)");
  mcp->footer(
      "An MCP server whose tools create sandboxes, run commands and edit files through the daemon\n"
      "(--url, BULKHEAD_URL, BULKHEAD_STATE and BULKHEAD_API_KEY apply). Register it in an MCP client:\n"
      "  {\"command\": \"bulkhead\", \"args\": [\"mcp\"]}\n"
      "Messages are JSON-RPC, one per line; logs go to stderr. See docs/mcp.md.");
  Selects(mcp, line, Command::kMcp);

  CLI::App* e2b = app.add_subcommand("e2b", "The E2B-compatible front: run code written for E2B's SDKs here");
  e2b->require_subcommand(1);
  CLI::App* e2b_env = e2b->add_subcommand("env", "Print the E2B_* variables that point the e2b SDKs at this daemon");
  e2b_env->footer("Use: eval \"$(bulkhead e2b env)\". Reads the key from the state dir (<state dir>/e2b-api-key).");
  Selects(e2b_env, line, Command::kE2bEnv);

  CLI::App* audit = app.add_subcommand("audit", "The audit trail: every call that changed something, hash-chained");
  audit->require_subcommand(1);
  CLI::App* audit_verify = audit->add_subcommand("verify", "Check <state dir>/audit.log for edited, removed or moved records");
  audit_verify->add_option("--head", line.audit_head,
                           "SEQ:HASH a verify printed before (kept elsewhere): also catches records cut off the end");
  audit_verify->footer("Reads the file itself: run as the daemon's user. Exit 1 if the chain is broken.");
  Selects(audit_verify, line, Command::kAuditVerify);
  CLI::App* audit_export = audit->add_subcommand("export", "Print the records, one JSON object per line, oldest first");
  audit_export->add_option("--after", line.audit_after, "Only records after this seq");
  Selects(audit_export, line, Command::kAuditExport);

  CLI::App* tenant = app.add_subcommand("tenant", "Manage tenants (with the host's admin key)");
  tenant->require_subcommand(1);
  CLI::App* tenant_create = tenant->add_subcommand("create", "Create a tenant");
  tenant_create->add_option("name", line.tenant_names, "Tenant name (a-z, 0-9, '-')")->required()->expected(1);
  tenant_create->add_option("--quota", line.tenant_quotas,
                            "A quota, KEY=VALUE (repeatable): sandboxes, cpus, memory_mb, disk_mb, snapshots, "
                            "snapshot_bytes, creates_per_minute");
  tenant_create->add_flag("--json", line.json, "Print the API's JSON");
  Selects(tenant_create, line, Command::kTenantCreate);
  CLI::App* tenant_show = tenant->add_subcommand("show", "Show a tenant's quotas and what it holds of them");
  tenant_show->add_option("name", line.tenant_name, "Tenant name")->required();
  tenant_show->add_flag("--json", line.json, "Print the API's JSON");
  Selects(tenant_show, line, Command::kTenantShow);
  CLI::App* tenant_quota = tenant->add_subcommand("quota", "Set or remove (KEY=none) a tenant's quotas");
  tenant_quota->add_option("name", line.tenant_name, "Tenant name")->required();
  tenant_quota->add_option("quotas", line.tenant_quotas, "KEY=VALUE, or KEY=none to remove that quota")->required();
  tenant_quota->add_flag("--json", line.json, "Print the API's JSON");
  Selects(tenant_quota, line, Command::kTenantQuota);
  CLI::App* tenant_egress = tenant->add_subcommand(
      "egress", "Set (in place of the old ones) or clear a tenant's egress rules: a default policy and deny entries");
  tenant_egress->add_option("name", line.tenant_name, "Tenant name")->required();
  tenant_egress->add_option("--mode", line.tenant_egress_mode,
                            "The default policy's mode (none, allowlist, open) for its sandboxes created without one")
      ->check(CLI::IsMember({"none", "allowlist", "open"}));
  tenant_egress->add_option("--allow", line.tenant_egress_allow, "An allow entry of the default policy; repeatable")
      ->needs("--mode");
  tenant_egress->add_option("--deny", line.tenant_egress_deny,
                            "A deny entry every sandbox of the tenant carries, whatever its policy; repeatable");
  tenant_egress->add_flag("--clear", line.tenant_egress_clear, "Remove the tenant's egress rules")
      ->excludes("--mode")
      ->excludes("--deny");
  tenant_egress->add_flag("--json", line.json, "Print the API's JSON");
  Selects(tenant_egress, line, Command::kTenantEgress);
  CLI::App* tenant_list = tenant->add_subcommand("ls", "List tenants and what they own");
  tenant_list->alias("list");
  tenant_list->add_flag("--json", line.json, "Print the API's JSON");
  Selects(tenant_list, line, Command::kTenantList);
  CLI::App* tenant_remove = tenant->add_subcommand("rm", "Remove tenants and their keys (refused while one owns sandboxes or snapshots)");
  tenant_remove->add_option("names", line.tenant_names, "Tenant names")->required();
  tenant_remove->add_flag("--purge", line.tenant_purge,
                          "Delete everything each owns first (sandboxes, snapshots, egress logs, keys, quotas) and "
                          "print what went and what is left (nothing); the audit log is kept");
  tenant_remove->add_flag("--json", line.json, "With --purge: print the API's JSON proof");
  Selects(tenant_remove, line, Command::kTenantRemove);

  CLI::App* key = app.add_subcommand("key", "Manage tenants' API keys");
  key->require_subcommand(1);
  CLI::App* key_create = key->add_subcommand("create", "Create a key and print it (shown this once)");
  key_create->add_option("--tenant", line.key_tenant, "Its tenant (a tenant's admin key: its own, the default)");
  key_create->add_option("--scope", line.key_scope, "tenant-admin, user or read-only")
      ->required()
      ->check(CLI::IsMember({"tenant-admin", "user", "read-only"}));
  key_create->add_option("--name", line.key_name, "What it is for");
  key_create->add_option("--ttl", line.key_ttl_s, "Seconds until it expires (default: never)")
      ->check(CLI::NonNegativeNumber);
  key_create->add_flag("--json", line.json, "Print the API's JSON");
  Selects(key_create, line, Command::kKeyCreate);
  CLI::App* key_list = key->add_subcommand("ls", "List keys (never their secrets)");
  key_list->alias("list");
  key_list->add_flag("--json", line.json, "Print the API's JSON");
  Selects(key_list, line, Command::kKeyList);
  CLI::App* key_revoke = key->add_subcommand("revoke", "Revoke keys: their next request fails");
  key_revoke->add_option("ids", line.key_ids, "Key ids")->required();
  Selects(key_revoke, line, Command::kKeyRevoke);

  CLI::App* version = app.add_subcommand("version", "Print the client's and the daemon's version");
  Selects(version, line, Command::kVersion);
}

int ExitForParseError(CLI::App& app, const CLI::ParseError& error) {
  int code = app.exit(error);
  if (code == 0) return 0;  // --help, --version
  // Unexpected arguments to run/exec are nearly always a command's own options.
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    for (const char* name : {"run", "exec"}) {
      if (app.got_subcommand(name)) {
        std::cerr << "hint: put -- before the command: bulkhead " << name << " [flags] -- CMD ARGS...\n";
      }
    }
  }
  return 2;
}

std::string DefaultE2bListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return "";
  const std::string port = listen.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return "";
  const int number = std::stoi(port);
  if (number == 0) return listen;  // any free port, as the API's
  if (number >= 65535) return "";
  return listen.substr(0, colon + 1) + std::to_string(number + 1);
}

core::DaemonConfig DaemonConfigFromCommandLine(const CommandLine& line) {
  core::DaemonConfig config;
  config.state_dir = line.state_dir;
  if (line.listen) {
    config.listen = *line.listen;
  } else if (const char* listen = std::getenv("BULKHEAD_LISTEN"); listen != nullptr) {
    config.listen = listen;  // set but empty = unix socket only (CLI11 skips empty variables)
  }
  for (const std::string& entry : line.warm_pools) {
    const WarmPoolEntry pool = *ParseWarmPool(entry);  // checked by WarmPoolValidator
    if (pool.runtime.empty() && pool.image.empty()) {
      config.warm_pool = pool.count;
      config.runtime_warm_pools.clear();
    }
  }
  for (const std::string& entry : line.warm_pools) {
    const WarmPoolEntry pool = *ParseWarmPool(entry);
    if (!pool.image.empty()) {
      config.image_warm_pools.push_back({pool.image, pool.runtime, pool.count});
    } else if (!pool.runtime.empty()) {
      config.runtime_warm_pools[pool.runtime] = pool.count;
      config.warm_pool_named.insert(pool.runtime);
    }
  }
  if (line.runsc) config.runsc = *line.runsc;
  config.microvm_templates = !line.no_microvm_templates;
  config.microvm_memory_snapshots = !line.no_microvm_memory_snapshots;
  config.idle_pause_to_disk = line.idle_pause == "disk";
  if (line.default_runtime) config.default_runtime = *line.default_runtime;
  if (line.io_threads) config.io_threads = *line.io_threads;
  if (line.blocking_threads) config.blocking_threads = *line.blocking_threads;
  if (line.output_rate_mib) config.output_rate_mib = *line.output_rate_mib;
  config.max_sandboxes = line.max_sandboxes.value_or(core::DefaultMaxSandboxes(core::HostMemoryMib()));
  config.audit_keep_days = line.audit_keep_days;
  config.egress_keep_days = line.egress_keep_days;
  config.tls_cert = line.tls_cert;
  config.tls_key = line.tls_key;
  config.dns_servers = line.dns_servers;
  if (line.preview_domain) config.preview_domain = *line.preview_domain;
  config.e2b_listen = line.e2b_listen ? *line.e2b_listen : DefaultE2bListen(config.listen);
  config.e2b_listen_given = line.e2b_listen.has_value();
  if (line.e2b_domain) config.e2b_domain = *line.e2b_domain;
  if (line.open_subnet) config.open_subnet = *line.open_subnet;
  if (line.storage_driver) config.storage_driver = *line.storage_driver;
  config.registry.default_registry = line.default_registry;
  config.registry.insecure.insert(line.insecure_registries.begin(), line.insecure_registries.end());
  config.registry.auth_file = line.registry_auth;
  config.registry.ca_file = line.registry_ca;
  if (const char* key = std::getenv("BULKHEAD_API_KEY"); key != nullptr && *key != '\0') config.api_key = key;
  return config;
}

Result<WarmPoolEntry> ParseWarmPool(const std::string& text) {
  const size_t equals = text.rfind('=');
  std::string key = equals == std::string::npos ? "" : text.substr(0, equals);
  const std::string count = equals == std::string::npos ? text : text.substr(equals + 1);
  auto invalid = [&] {
    return MakeError(ErrorCode::kInvalid,
                     "--warm-pool takes N, RUNTIME=N (native, gvisor, microvm), IMAGE=N or IMAGE@RUNTIME=N, not " + text);
  };
  auto is_runtime = [](const std::string& name) { return name == "native" || name == "gvisor" || name == "microvm"; };
  if (count.empty() || count.size() > 6 || count.find_first_not_of("0123456789") != std::string::npos)
    return invalid();
  WarmPoolEntry entry;
  entry.count = std::stoi(count);
  if (equals == std::string::npos) return entry;
  if (is_runtime(key)) {
    entry.runtime = key;
    return entry;
  }
  // IMAGE@RUNTIME: a digest's '@' is followed by "sha256:", never by a runtime's name.
  if (const size_t at = key.rfind('@'); at != std::string::npos && is_runtime(key.substr(at + 1))) {
    entry.runtime = key.substr(at + 1);
    key.resize(at);
  }
  // (Any registry stands in for the default one the daemon may be given: only the syntax is checked.)
  const bool valid = storage::IsRegistryReference(key) ? storage::ParseImageRef(key, "registry.invalid").ok()
                                                       : storage::IsSafeName(key);
  if (!valid) return invalid();
  entry.image = key;
  return entry;
}

Result<std::pair<std::string, std::optional<std::string>>> ParseKeyValue(const std::string& text,
                                                                          bool allow_from_environment) {
  size_t equals = text.find('=');
  std::string key = text.substr(0, equals);
  if (key.empty()) {
    return MakeError(ErrorCode::kBadRequest, "'" + text + "' is not KEY=VALUE", "invalid_argument");
  }
  if (equals != std::string::npos) return std::pair{key, std::optional(text.substr(equals + 1))};
  if (!allow_from_environment) {
    return MakeError(ErrorCode::kBadRequest, "'" + text + "' is not KEY=VALUE", "invalid_argument");
  }
  const char* value = std::getenv(key.c_str());
  if (value == nullptr) return std::pair{key, std::optional<std::string>()};
  return std::pair{key, std::optional<std::string>(value)};
}

Result<ClientSettings> ResolveClientSettings(const CommandLine& line) {
  ClientSettings settings;
  if (line.url.empty()) {
    settings.address = DefaultServerAddress(line.state_dir);
  } else {
    auto address = ParseServerUrl(line.url);
    if (!address.ok()) return address.error();
    settings.address = *address;
    settings.address.ca_file = line.ca_cert;
  }
  if (const char* key = std::getenv("BULKHEAD_API_KEY"); key != nullptr && *key != '\0') {
    settings.api_key = key;
    settings.api_key_source = "BULKHEAD_API_KEY";
    return settings;
  }
  // An unreadable key file is not an error here: /healthz needs no key, and a 401 from
  // the daemon names the file.
  settings.api_key_source = line.state_dir + "/api-key";
  std::ifstream key_file(settings.api_key_source);
  if (key_file) {
    std::ostringstream contents;
    contents << key_file.rdbuf();
    std::string key = contents.str();
    size_t end = key.find_last_not_of(" \t\r\n");
    key.erase(end == std::string::npos ? 0 : end + 1);
    settings.api_key = key.substr(std::min(key.size(), key.find_first_not_of(" \t\r\n")));
  }
  return settings;
}

}  // namespace bulkhead::cli
