#include "init/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <signal.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "common/ctl_protocol.h"
#include "init/file_worker.h"
#include "init/pty.h"

namespace bulkhead::init {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

int workload_cgroup_fd = -1;  // AdoptWorkloadCgroup

// What the child reports on the error pipe when a step before exec fails.
enum class ChildStep : int { kStdio, kGroups, kGid, kUid, kCwd, kTerminal, kCgroup };
struct ChildFailure {
  ChildStep step;
  int error;
};

// Everything the child needs, prepared before fork so the child only makes system calls.
struct ChildPlan {
  std::vector<char*> argv;  // null-terminated, pointing into the request
  std::vector<char*> envp;  // null-terminated, pointing into `environment`
  std::vector<std::string> exec_paths;  // the files to try, in PATH order
  const char* cwd;
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;
  // Init already is this uid/gid, so a refused setgroups() changes nothing (a non-root test run).
  bool already_this_identity;
  int stdin_fd, stdout_fd, stderr_fd;  // the child's ends
  bool controlling_tty;                 // stdin_fd is a pty slave to make the session's terminal
  int error_fd;                         // write end of the close-on-exec error pipe
  const std::string* file_op;           // a file operation to run instead of exec, or null
  struct rlimit nofile;                 // RLIMIT_NOFILE to set (0: keep init's)
};

bool HasKey(const std::vector<std::string>& env, std::string_view key) {
  for (const auto& entry : env) {
    if (entry.size() > key.size() && entry.compare(0, key.size(), key) == 0 && entry[key.size()] == '=') return true;
  }
  return false;
}

std::string_view GetValue(const std::vector<std::string>& env, std::string_view key) {
  for (const auto& entry : env) {
    if (entry.size() > key.size() && entry.compare(0, key.size(), key) == 0 && entry[key.size()] == '=') {
      return std::string_view(entry).substr(key.size() + 1);
    }
  }
  return {};
}

// execvpe's search, with the command's own PATH rather than init's.
std::vector<std::string> ExecPaths(const std::string& program, std::string_view path_var) {
  if (program.find('/') != std::string::npos) return {program};
  std::vector<std::string> paths;
  size_t start = 0;
  while (true) {
    size_t end = path_var.find(':', start);
    std::string_view dir = path_var.substr(start, end - start);
    paths.push_back((dir.empty() ? std::string(".") : std::string(dir)) + "/" + program);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return paths;
}

Status MakePipe(UniqueFd* read_end, UniqueFd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return MakeError(ErrorCode::kInternal, std::string("pipe2: ") + std::strerror(errno));
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  return {};
}

void SetNonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

[[noreturn]] void ReportAndExit(int error_fd, ChildStep step) {
  ChildFailure failure{step, errno};
  ssize_t ignored = ::write(error_fd, &failure, sizeof(failure));
  (void)ignored;
  ::_exit(127);
}

void CloseFdsAbove2() {
  if (::close_range(3, ~0U, 0) == 0) return;
  // close_range refused (an old kernel or a filter): close one by one.
  struct rlimit limit;
  int max_fd = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? int(limit.rlim_cur) : 65536;
  for (int fd = 3; fd < max_fd; ++fd) ::close(fd);
}

// Runs in the forked child. Failures before exec go to the error pipe (the parent turns them
// into kError); once every other fd is closed, failures are the command's own, as in a shell.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  // Init ignores and blocks signals; the command starts from the defaults.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
  sigset_t empty;
  ::sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);

  // Its own session and process group, so a timeout or disconnect can kill all of it.
  ::setsid();
  if (plan.controlling_tty && ::ioctl(plan.stdin_fd, TIOCSCTTY, 0) != 0) ReportAndExit(plan.error_fd, ChildStep::kTerminal);

  // Out of init's group before anything of the command's runs: its memory counts against
  // the workload's limit, and init's reserve stays init's.
  if (workload_cgroup_fd >= 0 && ::write(workload_cgroup_fd, "0", 1) != 1) {
    ReportAndExit(plan.error_fd, ChildStep::kCgroup);
  }

  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0) {
    ReportAndExit(plan.error_fd, ChildStep::kStdio);
  }

  if (::setgroups(plan.groups.size(), plan.groups.data()) != 0 && !(errno == EPERM && plan.already_this_identity)) {
    ReportAndExit(plan.error_fd, ChildStep::kGroups);
  }
  if (::setresgid(plan.gid, plan.gid, plan.gid) != 0) ReportAndExit(plan.error_fd, ChildStep::kGid);
  if (::setresuid(plan.uid, plan.uid, plan.uid) != 0) ReportAndExit(plan.error_fd, ChildStep::kUid);
  // A uid change resets dumpability to the host's fs.suid_dumpable, which may be 1: this
  // process still holds init's memory (and a file worker never execs), so not for the user.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

  // After setuid, so the directory is checked with the command's own permissions.
  if (::chdir(plan.cwd) != 0) ReportAndExit(plan.error_fd, ChildStep::kCwd);

  // Nothing of init's may reach the command (CVE-2024-21626). This also closes the error pipe,
  // which tells the parent the command is starting.
  CloseFdsAbove2();
  // The command's descriptor limit, after init's descriptors are gone (the fallback above
  // closes up to init's limit). Lowering needs no privilege; raising the hard limit would.
  if (plan.nofile.rlim_max > 0) ::setrlimit(RLIMIT_NOFILE, &plan.nofile);

  // A file operation's worker is this process, as the request's user in the sandbox: no exec.
  if (plan.file_op) ::_exit(RunFileOp(*plan.file_op));

  int error = ENOENT;
  bool saw_eacces = false;
  for (const auto& path : plan.exec_paths) {
    ::execve(path.c_str(), plan.argv.data(), plan.envp.data());
    error = errno;
    if (error == EACCES) {
      saw_eacces = true;
      continue;
    }
    // Like execvpe: keep searching past entries that do not hold the program.
    if (error == ENOENT || error == ENOTDIR || error == ESTALE || error == ENODEV || error == ETIMEDOUT) continue;
    break;
  }
  if (saw_eacces && (error == ENOENT || error == ENOTDIR)) error = EACCES;

  // (No allocation: this child may share init's memory.)
  for (const char* part : {"bulkhead: exec ", static_cast<const char*>(plan.argv[0]), ": ",
                           static_cast<const char*>(std::strerror(error)), "\n"}) {
    ssize_t ignored = ::write(2, part, std::strlen(part));
    (void)ignored;
  }
  ::_exit(error == EACCES || error == ENOEXEC ? 126 : 127);
}

int RunChildEntry(void* plan) { RunChild(*static_cast<const ChildPlan*>(plan)); }

// Whether a command's child may share init's memory until it execs. Its setresuid() makes the
// memory's dumpability fs.suid_dumpable; at 1, until the child's next step sets it back to 0,
// a process of the command's user could ptrace the child, and through it write init's memory.
// gVisor's kernel has no such file and always makes it 0. Read at every spawn (three system
// calls): the host's root may change it while the sandbox runs.
bool ChildMayShareMemory() {
  UniqueFd fd(::open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC));
  if (!fd) return errno == ENOENT;
  char value = '?';
  return ::read(fd.get(), &value, 1) == 1 && value == '0';
}

// The stack of a child that shares init's memory until it execs; init has one thread, and
// CLONE_VFORK holds it until the child has exec'd or exited, so one child uses it at a time.
alignas(64) char shared_child_stack[64 * 1024];

Error ChildFailureToError(const ChildFailure& failure, const ExecRequest& request, const UserIdentity& user) {
  std::string reason = std::strerror(failure.error);
  // EINVAL from setgroups/setresgid/setresuid: an id the sandbox's user namespace does not
  // map (it maps 0-65535), e.g. "user": "70000". The request's fault, not the daemon's.
  const bool identity_step =
      failure.step == ChildStep::kGroups || failure.step == ChildStep::kGid || failure.step == ChildStep::kUid;
  if (identity_step && failure.error == EINVAL) {
    return MakeError(ErrorCode::kInvalid, "user " + request.user.value_or("") + " (uid " + std::to_string(user.uid) +
                                              ", gid " + std::to_string(user.gid) +
                                              "): an id outside the ones this sandbox maps");
  }
  switch (failure.step) {
    case ChildStep::kCwd:
      if (failure.error == ENOENT || failure.error == ENOTDIR) {
        return MakeError(ErrorCode::kNotFound, "cwd " + request.cwd + ": " + reason);
      }
      return MakeError(ErrorCode::kInvalid, "cwd " + request.cwd + ": " + reason);
    case ChildStep::kStdio: return MakeError(ErrorCode::kInternal, "dup2: " + reason);
    case ChildStep::kTerminal: return MakeError(ErrorCode::kInternal, "TIOCSCTTY: " + reason);
    case ChildStep::kGroups: return MakeError(ErrorCode::kInternal, "setgroups: " + reason);
    case ChildStep::kGid: return MakeError(ErrorCode::kInternal, "setgid " + std::to_string(user.gid) + ": " + reason);
    case ChildStep::kUid: return MakeError(ErrorCode::kInternal, "setuid " + std::to_string(user.uid) + ": " + reason);
    case ChildStep::kCgroup: return MakeError(ErrorCode::kInternal, "join the workload cgroup: " + reason);
  }
  return MakeError(ErrorCode::kInternal, "command setup failed: " + reason);
}

}  // namespace

void AdoptWorkloadCgroup() {
  struct statfs fs {};
  if (::fstatfs(ctl::kWorkloadCgroupFd, &fs) != 0) return;
  if (fs.f_type != CGROUP_SUPER_MAGIC && fs.f_type != CGROUP2_SUPER_MAGIC) return;
  ::fcntl(ctl::kWorkloadCgroupFd, F_SETFD, FD_CLOEXEC);
  workload_cgroup_fd = ctl::kWorkloadCgroupFd;
}

std::vector<std::string> BuildEnvironment(const std::vector<std::string>& requested, const UserIdentity& user,
                                          bool terminal) {
  std::vector<std::string> env = requested;
  if (terminal && !HasKey(env, "TERM")) env.push_back("TERM=xterm-256color");
  if (!HasKey(env, "PATH")) env.push_back(std::string("PATH=") + kDefaultPath);
  if (!HasKey(env, "HOME")) env.push_back("HOME=" + user.home);
  if (!user.name.empty()) {
    if (!HasKey(env, "USER")) env.push_back("USER=" + user.name);
    if (!HasKey(env, "LOGNAME")) env.push_back("LOGNAME=" + user.name);
  }
  return env;
}

Result<SpawnedCommand> SpawnCommand(const ExecRequest& request, const int* stdio) {
  // Failures found here cost no fork.
  auto user = ResolveUser(request.user ? *request.user : std::to_string(::getuid()));
  if (!user.ok()) return user.error();
  struct stat cwd_stat;
  if (::stat(request.cwd.c_str(), &cwd_stat) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return MakeError(ErrorCode::kNotFound, "cwd " + request.cwd + ": " + std::strerror(errno));
    }
  } else if (!S_ISDIR(cwd_stat.st_mode)) {
    return MakeError(ErrorCode::kNotFound, "cwd " + request.cwd + ": " + std::strerror(ENOTDIR));
  }

  std::vector<std::string> environment = BuildEnvironment(request.env, *user, request.pty.has_value());

  SpawnedCommand command;
  UniqueFd child_stdin, child_stdout, child_stderr, error_read, error_write;
  if (stdio) {
    // The child's ends are the given descriptors; init keeps no end of its own.
  } else if (request.pty) {
    // The slave is the child's stdin, stdout and stderr alike.
    auto pty = OpenPty(*request.pty, user->uid);
    if (!pty.ok()) return pty.error();
    child_stdin = std::move(pty->slave);
    command.stdin_fd.reset(::fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 3));
    command.stdout_fd.reset(::fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 3));
    command.pty_fd = std::move(pty->master);
    if (!command.stdin_fd || !command.stdout_fd) return MakeError(ErrorCode::kInternal, std::string("dup: ") + std::strerror(errno));
  } else if (request.stdin_enabled) {
    BH_TRY(MakePipe(&child_stdin, &command.stdin_fd));
  } else {
    child_stdin.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!child_stdin) return MakeError(ErrorCode::kInternal, std::string("open /dev/null: ") + std::strerror(errno));
  }
  if (!request.pty && !stdio) {
    BH_TRY(MakePipe(&command.stdout_fd, &child_stdout));
    BH_TRY(MakePipe(&command.stderr_fd, &child_stderr));
  }
  BH_TRY(MakePipe(&error_read, &error_write));

  ChildPlan plan;
  for (const auto& arg : request.argv) plan.argv.push_back(const_cast<char*>(arg.c_str()));
  plan.argv.push_back(nullptr);
  for (const auto& entry : environment) plan.envp.push_back(const_cast<char*>(entry.c_str()));
  plan.envp.push_back(nullptr);
  if (!request.file_op) plan.exec_paths = ExecPaths(request.argv[0], GetValue(environment, "PATH"));
  // The worker takes its operation as text (file_worker.h).
  const std::string file_op =
      request.file_op ? request.file_op->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : "";
  plan.file_op = request.file_op ? &file_op : nullptr;
  plan.nofile.rlim_cur = plan.nofile.rlim_max = request.nofile.value_or(0);
  plan.cwd = request.cwd.c_str();
  plan.uid = user->uid;
  plan.gid = user->gid;
  plan.groups = user->groups;
  plan.already_this_identity = ::getuid() == user->uid && ::geteuid() == user->uid &&
                               ::getgid() == user->gid && ::getegid() == user->gid;
  plan.stdin_fd = stdio ? stdio[0] : child_stdin.get();
  plan.stdout_fd = stdio ? stdio[1] : request.pty ? child_stdin.get() : child_stdout.get();
  plan.stderr_fd = stdio ? stdio[2] : request.pty ? child_stdin.get() : child_stderr.get();
  plan.controlling_tty = request.pty.has_value() && !stdio;
  plan.error_fd = error_write.get();

  // A command's child shares init's memory until it execs (CLONE_VM|CLONE_VFORK, as
  // posix_spawn does): no copy of init's address space is made only to be thrown away by the
  // exec. On gVisor that copy is most of what an exec costs. A file worker runs init's own code
  // and never execs, so it gets a copy of its own (fork), as does every child where sharing
  // would not be safe.
  pid_t pid = plan.file_op || !ChildMayShareMemory()
                   ? ::fork()
                   : ::clone(RunChildEntry, shared_child_stack + sizeof shared_child_stack,
                                     CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  if (pid < 0) return MakeError(ErrorCode::kInternal, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) RunChild(plan);  // (only a fork returns here as the child)

  command.pid = pid;
  child_stdin.reset();
  child_stdout.reset();
  child_stderr.reset();
  error_write.reset();

  // Wait until the child has either closed the error pipe (it is about to exec) or reported
  // a failed step. This is short: the child makes a handful of system calls before either.
  ChildFailure failure;
  size_t got = 0;
  while (got < sizeof(failure)) {
    ssize_t n = ::read(error_read.get(), reinterpret_cast<char*>(&failure) + got, sizeof(failure) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  if (got == sizeof(failure)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return ChildFailureToError(failure, request, *user);
  }

  if (command.stdin_fd) SetNonblocking(command.stdin_fd.get());
  if (command.stdout_fd) SetNonblocking(command.stdout_fd.get());
  if (command.stderr_fd) SetNonblocking(command.stderr_fd.get());
  return command;
}

}  // namespace bulkhead::init
