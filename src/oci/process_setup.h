// The last steps before a container's process runs, shared by `create` (its first process)
// and `exec` (one more): from host root in the container's namespaces to the spec's user
// inside the container's user namespace, with bulkhead's capability ceiling, rlimits,
// no_new_privs and seccomp filter, then exec. Each runs in the process that becomes the
// container's; a failure is reported to the parent and ends it.
#pragma once
#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "oci/spec.h"

namespace bulkhead::oci {

// Every capability in effect (with fsuid/fsgid at `host_uid`, so the files the setup makes
// are the container root's): what the mount steps run with.
Status ActAsContainerRootOnHost(uid_t host_uid);

// A connection to the caller's console socket (--console-socket), made before the container's
// root hides the socket's path.
Result<UniqueFd> ConnectConsoleSocket(const std::string& path);
// A pty of the container's devpts: its master goes to the console socket, its replica becomes
// stdio and the controlling terminal of a new session.
Status SetupConsole(int console_socket);

// setns into the container's user namespace, then the spec's groups and ids, capabilities (the
// spec's sets within bulkhead's sandbox set), rlimits and umask; then chdir to cwd.
Status BecomeProcessUser(int userns_fd, const Process& process);
// The executable args[0] names, looked up in the process's PATH as seen inside.
Result<std::string> FindExecutable(const Process& process);
// no_new_privs and the filter (always: a spec cannot loosen them).
Status LockDown(const std::vector<sock_filter>& filter);
// Never returns on success.
Status ExecProcess(const std::string& path, const Process& process);

// A setup child's end of the pipe its parent reads: one line, "ok" or the error that ends it.
struct SetupReport {
  int fd = -1;
  void Ok() const;
  [[noreturn]] void Fail(const Error& error) const;
  void Check(const Status& status) const {
    if (!status.ok()) Fail(status.error());
  }
};

}  // namespace bulkhead::oci
