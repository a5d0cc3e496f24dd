// bulkhead-oci's commands, as runc names them and containerd's runc shim calls them
// (docs/kubernetes.md lists what each takes). Each answers the process's exit code.
#pragma once
#include <string>
#include <vector>

namespace bulkhead::oci {

struct GlobalOptions {
  std::string root = "/run/bulkhead-oci";  // state of every container
  std::string log;                         // errors also go here (containerd reads the last one)
  std::string log_format = "text";         // or json, as runc writes it
  bool systemd_cgroup = false;             // cgroupsPath in systemd's slice:prefix:name form
};

struct CreateOptions {
  std::string id, bundle = ".", pid_file, console_socket;
};

struct ExecOptions {
  std::string id, process_file, pid_file, console_socket;
  bool detach = false;
};

int Create(const GlobalOptions& global, const CreateOptions& options);
int Start(const GlobalOptions& global, const std::string& id);
int State(const GlobalOptions& global, const std::string& id);
int Kill(const GlobalOptions& global, const std::string& id, const std::string& signal, bool all);
int Delete(const GlobalOptions& global, const std::string& id, bool force);
int Pause(const GlobalOptions& global, const std::string& id, bool pause);
int Ps(const GlobalOptions& global, const std::string& id, const std::string& format);
int Exec(const GlobalOptions& global, const ExecOptions& options);
int Update(const GlobalOptions& global, const std::string& id, const std::string& resources_file);

// Writes an error where the caller looks for it (stderr, and --log as runc formats it); answers 1.
int Fail(const GlobalOptions& global, const std::string& message);

}  // namespace bulkhead::oci
