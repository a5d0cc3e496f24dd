// bulkhead-oci: an OCI runtime with runc's command line, so that containerd (through its runc
// shim, io.containerd.runc.v2 with BinaryName) runs Kubernetes pods inside bulkhead's walls.
// docs/kubernetes.md says why a runc-compatible runtime rather than a shim of our own.
#include <CLI/CLI.hpp>

#include "oci/commands.h"
#include "oci/pod_egress.h"

int main(int argc, char** argv) {
  using namespace bulkhead::oci;
  CLI::App app{"bulkhead-oci: an OCI runtime (runc's command line) that runs containers in bulkhead's sandboxes"};
  app.set_version_flag("-v,--version", "bulkhead-oci 0.1 (OCI runtime spec 1.0.2)");
  app.require_subcommand(1);
  GlobalOptions global;
  bool debug = false;
  app.add_option("--root", global.root, "where container state is kept");
  app.add_option("--log", global.log, "file errors are appended to");
  app.add_option("--log-format", global.log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--systemd-cgroup", global.systemd_cgroup, "cgroupsPath is systemd's slice:prefix:name");
  app.add_flag("--debug", debug, "(accepted for runc compatibility)");

  CreateOptions create;
  auto* create_cmd = app.add_subcommand("create", "create a container, its process held until start");
  create_cmd->add_option("-b,--bundle", create.bundle, "the bundle directory (config.json, rootfs)");
  create_cmd->add_option("--pid-file", create.pid_file, "file to write the process's host pid to");
  create_cmd->add_option("--console-socket", create.console_socket, "socket the pty master is sent to");
  bool ignored = false;
  create_cmd->add_flag("--no-pivot,--no-new-keyring", ignored, "(accepted for runc compatibility; always pivots)");
  create_cmd->add_option("id", create.id)->required();

  std::string id, signal = "SIGTERM", format = "table", resources = "-";
  bool all = false, force = false;
  auto* start_cmd = app.add_subcommand("start", "start a created container's process");
  start_cmd->add_option("id", id)->required();
  auto* state_cmd = app.add_subcommand("state", "print a container's state as JSON");
  state_cmd->add_option("id", id)->required();
  auto* kill_cmd = app.add_subcommand("kill", "signal a container's process (or all of them)");
  kill_cmd->add_flag("-a,--all", all, "every process in the container");
  kill_cmd->add_option("id", id)->required();
  kill_cmd->add_option("signal", signal);
  auto* delete_cmd = app.add_subcommand("delete", "remove a stopped container");
  delete_cmd->add_flag("-f,--force", force, "kill it first if it runs");
  delete_cmd->add_option("id", id)->required();
  auto* pause_cmd = app.add_subcommand("pause", "freeze every process of a container");
  pause_cmd->add_option("id", id)->required();
  auto* resume_cmd = app.add_subcommand("resume", "thaw a paused container");
  resume_cmd->add_option("id", id)->required();
  auto* ps_cmd = app.add_subcommand("ps", "list a container's processes");
  ps_cmd->add_option("-f,--format", format)->check(CLI::IsMember({"table", "json"}));
  ps_cmd->add_option("id", id)->required();
  auto* update_cmd = app.add_subcommand("update", "change a container's resource limits");
  update_cmd->add_option("-r,--resources", resources, "linux.resources JSON file, - for stdin");
  update_cmd->add_option("id", id)->required();
  ExecOptions exec;
  auto* exec_cmd = app.add_subcommand("exec", "run one more process in a container");
  exec_cmd->add_option("-p,--process", exec.process_file, "the process (config.json's process object)")->required();
  exec_cmd->add_option("--pid-file", exec.pid_file);
  exec_cmd->add_option("--console-socket", exec.console_socket);
  exec_cmd->add_flag("-d,--detach", exec.detach);
  exec_cmd->add_option("id", exec.id)->required();

  // The pod egress helper that `create` starts (oci/pod_egress.h); not for callers.
  std::string pod, netns, mode, allow, deny, egress_log;
  int ready_fd = -1;
  auto* egress_cmd = app.add_subcommand("egress", "")->group("");
  egress_cmd->add_option("--pod", pod)->required();
  egress_cmd->add_option("--netns", netns)->required();
  egress_cmd->add_option("--mode", mode)->required();
  egress_cmd->add_option("--allow", allow);
  egress_cmd->add_option("--deny", deny);
  egress_cmd->add_option("--log", egress_log)->required();
  egress_cmd->add_option("--ready-fd", ready_fd)->required();

  CLI11_PARSE(app, argc, argv);
  if (*egress_cmd) {
    auto settings = PodEgressSettings({{kEgressModeAnnotation, mode}, {kEgressAllowAnnotation, allow},
                                       {kEgressDenyAnnotation, deny}});
    if (!settings.ok() || !*settings) return Fail(global, settings.ok() ? "no egress mode" : settings.error().message);
    return RunEgressHelper(pod, netns, **settings, egress_log, ready_fd);
  }
  if (*create_cmd) return Create(global, create);
  if (*start_cmd) return Start(global, id);
  if (*state_cmd) return State(global, id);
  if (*kill_cmd) return Kill(global, id, signal, all);
  if (*delete_cmd) return Delete(global, id, force);
  if (*pause_cmd) return Pause(global, id, true);
  if (*resume_cmd) return Pause(global, id, false);
  if (*ps_cmd) return Ps(global, id, format);
  if (*update_cmd) return Update(global, id, resources);
  if (*exec_cmd) return Exec(global, exec);
  return 2;
}
