#include "oci/process_setup.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/sandbox_caps.h"
#include "common/send_fd.h"

namespace bulkhead::oci {
namespace {

Status SetCapabilities(uint64_t effective, uint64_t permitted, uint64_t inheritable) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; i++) {
    data[i].effective = static_cast<uint32_t>(effective >> (32 * i));
    data[i].permitted = static_cast<uint32_t>(permitted >> (32 * i));
    data[i].inheritable = static_cast<uint32_t>(inheritable >> (32 * i));
  }
  if (::syscall(SYS_capset, &header, data) != 0) return SystemError("capset", errno);
  return {};
}

uint64_t PermittedNow() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return 0;
  return uint64_t{data[0].permitted} | (uint64_t{data[1].permitted} << 32);
}

std::string EnvValue(const Process& process, const std::string& name) {
  for (const std::string& entry : process.env)
    if (entry.size() > name.size() && entry.compare(0, name.size() + 1, name + "=") == 0) return entry.substr(name.size() + 1);
  return {};
}

bool Executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Status ActAsContainerRootOnHost(uid_t host_uid) {
  ::setfsgid(host_uid);
  ::setfsuid(host_uid);
  // setfsuid away from 0 clears the file capabilities from the effective set; take them back.
  const uint64_t permitted = PermittedNow();
  return SetCapabilities(permitted, permitted, 0);
}

Result<UniqueFd> ConnectConsoleSocket(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return MakeError(ErrorCode::kInvalid, "console socket path is too long");
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    return SystemError("connect to console socket " + path, errno);
  return fd;
}

Status SetupConsole(int console_socket) {
  UniqueFd master(::open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master) return SystemError("open /dev/ptmx", errno);
  int unlock = 0;
  if (::ioctl(master.get(), TIOCSPTLCK, &unlock) != 0) return SystemError("unlock pty", errno);
  int replica = ::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY);
  if (replica < 0) return SystemError("open pty replica", errno);
  UniqueFd replica_fd(replica);
  // The master goes to whoever listens on the console socket (containerd's shim), named as runc names it.
  if (SendWithFd(console_socket, "/dev/ptmx", master.get()) < 0) return SystemError("send pty to console socket", errno);
  if (::setsid() < 0) return SystemError("setsid", errno);
  if (::ioctl(replica_fd.get(), TIOCSCTTY, 0) != 0) return SystemError("set controlling terminal", errno);
  for (int fd = 0; fd <= 2; fd++)
    if (::dup2(replica_fd.get(), fd) != fd) return SystemError("dup pty to stdio", errno);
  return {};
}

Status BecomeProcessUser(int userns_fd, const Process& process) {
  if (::setns(userns_fd, CLONE_NEWUSER) != 0) return SystemError("enter the container's user namespace", errno);
  const uint64_t ceiling = SandboxCapMask();
  const CapabilitySets& caps = process.capabilities;
  for (int c = 0; c <= 63; c++) {
    if ((caps.bounding & ceiling) & (uint64_t{1} << c)) continue;
    if (::prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) return SystemError("drop bounding capability", errno);
  }
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return SystemError("keep capabilities", errno);
  if (::setgroups(process.additional_gids.size(), process.additional_gids.data()) != 0)
    return SystemError("setgroups", errno);
  if (::setresgid(process.gid, process.gid, process.gid) != 0)
    return SystemError("setgid " + std::to_string(process.gid), errno);
  if (::setresuid(process.uid, process.uid, process.uid) != 0)
    return SystemError("setuid " + std::to_string(process.uid), errno);
  const uint64_t permitted = caps.permitted & ceiling;
  BH_TRY(SetCapabilities(caps.effective & permitted, permitted, caps.inheritable & ceiling));
  for (int c = 0; c <= 63; c++) {
    if (!((caps.ambient & permitted & caps.inheritable) & (uint64_t{1} << c))) continue;
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) != 0) return SystemError("raise ambient capability", errno);
  }
  if (::prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) return SystemError("keep capabilities off", errno);
  for (const Rlimit& limit : process.rlimits) {
    struct rlimit value {limit.soft, limit.hard};
    if (::setrlimit(limit.resource, &value) != 0) return SystemError("setrlimit", errno);
  }
  ::umask(process.umask.value_or(022));
  if (::chdir(process.cwd.c_str()) != 0) return SystemError("chdir to " + process.cwd, errno);
  return {};
}

Result<std::string> FindExecutable(const Process& process) {
  const std::string& name = process.args[0];
  if (name.find('/') != std::string::npos) {
    if (Executable(name)) return name;
    return MakeError(ErrorCode::kInvalid, "exec: \"" + name + "\": not an executable file");
  }
  std::string path = EnvValue(process, "PATH");
  if (path.empty()) path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (Executable(candidate)) return candidate;
    start = end + 1;
  }
  return MakeError(ErrorCode::kInvalid, "exec: \"" + name + "\": executable file not found in $PATH");
}

Status LockDown(const std::vector<sock_filter>& filter) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return SystemError("no_new_privs", errno);
  sock_fprog program{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) != 0) return SystemError("seccomp", errno);
  return {};
}

Status ExecProcess(const std::string& path, const Process& process) {
  std::vector<char*> argv, envp;
  for (const std::string& arg : process.args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const std::string& entry : process.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  // Nothing but stdio reaches the process, whatever its caller left open (CVE-2024-21626).
  if (::syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) return SystemError("close_range", errno);
  ::execve(path.c_str(), argv.data(), envp.data());
  return SystemError("exec " + path, errno);
}

void SetupReport::Ok() const { (void)!::write(fd, "ok\n", 3); }

void SetupReport::Fail(const Error& error) const {
  const std::string line = error.message + "\n";
  (void)!::write(fd, line.data(), line.size());
  _exit(1);
}

}  // namespace bulkhead::oci
