// bulkhead-init: PID 1 of a sandbox. Accepts control connections on fd 3, runs one command
// per connection or keeps it in its process table (ctl_protocol.h), reaps every process, and
// exits on SIGTERM. Once the daemon names sudo users (ctl::kSudoUsers) it also serves the sudo
// socket (sudo_protocol.h). Run under the name "sudo" it is the sandbox's sudo client instead.
//
// Single-threaded: one epoll loop, every fd nonblocking and close-on-exec, so no client can
// stall another.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/ctl_protocol.h"
#include "init/guest_boot.h"
#include "init/memory_guard.h"
#include "init/poller.h"
#include "init/process_table.h"
#include "init/self_contain.h"
#include "init/session.h"
#include "init/spawn.h"
#include "init/sudo_protocol.h"
#include "init/sudo_server.h"

namespace bulkhead::init {
namespace {

// Session tokens are (id << 8) | kind with id >= 1, so they never collide with these.
constexpr uint64_t kListenerToken = 1;
constexpr uint64_t kSignalToken = 2;
constexpr uint64_t kMemoryGuardToken = 3;
constexpr uint64_t kAcceptRetryToken = 4;
// Beyond this many connections init stops accepting until one ends (fds are finite).
constexpr size_t kMaxSessions = 1024;

// Commands get pipes for 0, 1 and 2; if init were started with one of them closed, a pipe
// could land there and be clobbered by dup2 in the child.
void EnsureStandardFdsOpen() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);  // takes the lowest free fd
  }
}

// As PID 1 the kernel already drops signals that have no handler; ignoring them explicitly
// gives the same behaviour when init runs as an ordinary process (tests). SIGCHLD and SIGTERM
// are blocked and read from a signalfd instead.
UniqueFd SetUpSignals() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGTERM) continue;
    ::sigaction(sig, &ignore, nullptr);  // fails harmlessly for glibc's internal signals
  }
  sigset_t handled;
  ::sigemptyset(&handled);
  ::sigaddset(&handled, SIGCHLD);
  ::sigaddset(&handled, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &handled, nullptr);
  return UniqueFd(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
}

class Init {
 public:
  int Run() {
    // Commands run as init's own uid (sandbox root), so only this keeps them from ptracing
    // init, reading its memory (every request's env) or taking its listening socket with
    // pidfd_getfd: a non-dumpable process admits only tracers with CAP_SYS_PTRACE, which
    // no sandbox process has. The forks of init keep it until they exec a command.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    EnsureStandardFdsOpen();
    // Not PID 1 (a test): become the reaper of orphaned descendants anyway.
    is_pid1_ = ::getpid() == 1;
    if (!is_pid1_) ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    int accepting = 0;
    socklen_t len = sizeof(accepting);
    struct stat control {};
    if (::getsockopt(ctl::kListenFd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting) {
      ::fcntl(ctl::kListenFd, F_SETFL, ::fcntl(ctl::kListenFd, F_GETFL) | O_NONBLOCK);
      listener_.fd.reset(ctl::kListenFd);
    } else if (::fstat(ctl::kListenFd, &control) == 0 && S_ISDIR(control.st_mode)) {
      control_dir_.reset(ctl::kListenFd);  // init dials the daemon (DialDaemon)
      root_dir_.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    } else {
      std::fprintf(stderr, "bulkhead-init: fd %d is neither a listening socket nor a directory\n", ctl::kListenFd);
      return 1;
    }
    ::fcntl(ctl::kListenFd, F_SETFD, FD_CLOEXEC);
    AdoptWorkloadCgroup();

    signals_.fd = SetUpSignals();
    if (!poller_.ok() || !signals_.fd) {
      std::fprintf(stderr, "bulkhead-init: epoll or signalfd setup failed\n");
      return 1;
    }
    poller_.Watch(signals_, kSignalToken, EPOLLIN);
    if (GuardedMemory() > 0) {  // contained itself (memory_guard.h)
      ArmTimer(memory_guard_, GuardMemory());
      poller_.Watch(memory_guard_, kMemoryGuardToken, EPOLLIN);
    }
    accept_backoff_.Start(poller_, kAcceptRetryToken);
    UpdateListener();
    DialDaemon();
    ReapChildren();  // children that exited before the signalfd existed

    epoll_event events[64];
    while (true) {
      int count = poller_.Wait(events, 64);
      for (int i = 0; i < count; ++i) {
        uint64_t token = events[i].data.u64;
        if (token == kListenerToken) {
          AcceptConnections();
        } else if (token == kSignalToken) {
          if (HandleSignals()) return Shutdown();
        } else if (token == kMemoryGuardToken) {
          uint64_t expirations;
          (void)!::read(memory_guard_.fd.get(), &expirations, sizeof expirations);
          ArmTimer(memory_guard_, GuardMemory());
          LookAtIdleConnections();
        } else if (token == kAcceptRetryToken) {
          accept_backoff_.OnTimer();
        } else if (SudoServer::OwnsToken(token)) {
          DispatchToSudo(token);
        } else if (ProcessTable::OwnsToken(token)) {
          DispatchToProcess(token);
        } else {
          DispatchToSession(token, events[i].events);
        }
      }
      if (processes_.TakeChanged()) NotifyAttachedSessions();
      RemoveFinishedSessions();
      UpdateListener();
      DialDaemon();
    }
  }

 private:
  void AcceptConnections() {
    while (sessions_.size() < kMaxSessions) {
      int fd = ::accept4(listener_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        accept_backoff_.Pause(errno);  // until a session ends, or a moment passes
        return;
      }
      uint64_t id = next_session_id_++;
      try {
        sessions_.emplace(id, std::make_unique<Session>(id, UniqueFd(fd), poller_, processes_, sudo_));
      } catch (const std::exception&) {
        return;  // out of memory: the socket closed with the failed Session
      }
    }
  }

  // Where init dials the daemon (fd 3 was the control directory): keeps kIdleConnections
  // connections to the daemon's socket there that wait for a request each. A connection that
  // gets one is that request's, and another is dialed; one the daemon drops (it restarted, or
  // gVisor restored the sandbox: host connections do not survive that) is dialed again. A
  // dial the daemon does not take (its socket gone, its backlog full) is tried again after
  // AcceptBackoff's pause.
  void DialDaemon() {
    if (!control_dir_) return;
    size_t idle = 0;
    for (const auto& [id, session] : sessions_) idle += session->idle() ? 1 : 0;
    while (idle < ctl::kIdleConnections && sessions_.size() < kMaxSessions && !accept_backoff_.paused()) {
      UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      // The directory is hidden from every path (self_contain.h): reached from init's own
      // working directory, for the moment of the connect (init has no other thread).
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::memcpy(address.sun_path, ctl::kDaemonSocketName, sizeof ctl::kDaemonSocketName);
      const bool connected = socket && ::fchdir(control_dir_.get()) == 0 &&
                             ::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
      (void)!::fchdir(root_dir_.get());
      if (!connected) {
        accept_backoff_.PauseAnyway();
        return;
      }
      uint64_t id = next_session_id_++;
      try {
        sessions_.emplace(id, std::make_unique<Session>(id, std::move(socket), poller_, processes_, sudo_));
      } catch (const std::exception&) {
        return;  // out of memory: the socket closed with the failed Session
      }
      ++idle;
    }
  }

  // gVisor's restore of a checkpoint cuts host connections without waking their waiters: the
  // memory guard's timer (it runs under gVisor, every 5 to 200 ms) has the idle ones looked at,
  // and those cut end (DialDaemon dials again), off the path of every other wake.
  void LookAtIdleConnections() {
    if (!control_dir_) return;
    for (auto& [id, session] : sessions_)
      if (session->idle()) session->LookAtIdleSocket();
  }

  // Returns true on a SIGTERM that init should obey. As PID 1 that is only one sent from
  // outside the sandbox (the sender is invisible in our pid namespace, ssi_pid 0): a command
  // must not be able to shut its sandbox's init down with kill(1, SIGTERM).
  bool HandleSignals() {
    bool terminate = false;
    signalfd_siginfo info;
    while (::read(signals_.fd.get(), &info, sizeof(info)) == sizeof(info)) {
      if (info.ssi_signo == SIGTERM && (!is_pid1_ || info.ssi_pid == 0)) terminate = true;
    }
    ReapChildren();
    return terminate;
  }

  // Every exited child, including orphans reparented to init; SIGCHLDs coalesce, so loop.
  void ReapChildren() {
    while (true) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) return;
      bool found = false;
      for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
        try {
          if (it->second->OnChildExit(pid, status)) {
            found = true;
            break;
          }
        } catch (const std::exception&) {
          sessions_.erase(it);  // out of memory: drop this connection, keep serving others
          found = true;
          break;
        }
      }
      if (!found) found = OnSudoChildExit(pid, status);
      if (!found) processes_.OnChildExit(pid, status);
    }
  }

  void DispatchToSudo(uint64_t token) {
    try {
      sudo_.OnEvent(token);
    } catch (const std::exception&) {
      // Out of memory: that client gets no answer; its connection ends with init's next try.
    }
  }

  bool OnSudoChildExit(pid_t pid, int status) {
    try {
      return sudo_.OnChildExit(pid, status);
    } catch (const std::exception&) {
      return true;
    }
  }

  void DispatchToProcess(uint64_t token) {
    try {
      processes_.OnEvent(token);
    } catch (const std::exception&) {
      // Out of memory: that output is lost; the process keeps running and being read.
    }
  }

  // Attached connections follow their process's output and stdin buffer.
  void NotifyAttachedSessions() {
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      try {
        it->second->OnProcessesChanged();
        ++it;
      } catch (const std::exception&) {
        it = sessions_.erase(it);
      }
    }
  }

  void DispatchToSession(uint64_t token, uint32_t events) {
    auto it = sessions_.find(Session::IdOf(token));
    if (it == sessions_.end()) return;  // a stale event for a session already gone
    try {
      it->second->OnEvent(Session::FdOf(token), events);
    } catch (const std::exception&) {
      sessions_.erase(it);  // out of memory or a bug: drop this connection, keep serving others
    }
  }

  void RemoveFinishedSessions() {
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->finished()) {
        it = sessions_.erase(it);
        accept_backoff_.Resume();
      } else {
        ++it;
      }
    }
  }

  void UpdateListener() {
    bool accepting = sessions_.size() < kMaxSessions && !accept_backoff_.paused();
    poller_.Watch(listener_, kListenerToken, accepting ? uint32_t(EPOLLIN) : 0u);
  }

  int Shutdown() {
    for (auto& [id, session] : sessions_) session->KillCommand();
    processes_.KillAll();
    sudo_.KillAll();
    return 0;
  }

  Poller poller_;
  PolledFd listener_;   // where init accepts the daemon's connections
  UniqueFd control_dir_, root_dir_;  // or where it dials them (DialDaemon)
  PolledFd signals_;
  PolledFd memory_guard_;  // a timerfd, where init holds the memory limit itself
  AcceptBackoff accept_backoff_;
  ProcessTable processes_{poller_};  // after poller_, before sessions_: sessions hold its processes
  SudoServer sudo_{poller_};          // before sessions_, which configure it
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;
  uint64_t next_session_id_ = 1;
  bool is_pid1_ = false;
};

}  // namespace
}  // namespace bulkhead::init

int main(int argc, char** argv) {
  std::string_view name = argc > 0 ? argv[0] : "";
  if (name.substr(name.find_last_of('/') + 1) == "sudo") return bulkhead::init::SudoClientMain(argc, argv);

  // `--self-contain DIR --limits JSON` (a kLimits payload): the tier's runtime started init
  // as a plain container process (self_contain.h); otherwise the tier gave it fds 3 and 4
  // (ctl_protocol.h).
  if (argc == 5 && std::string_view(argv[1]) == "--self-contain" && std::string_view(argv[3]) == "--limits") {
    auto limits = bulkhead::ctl::DecodeLimits(argv[4]);
    bulkhead::Status contained = limits.ok() ? bulkhead::init::SelfContain(argv[2], *limits) : bulkhead::Status(limits.error());
    if (!contained.ok()) {
      std::fprintf(stderr, "bulkhead-init: %s\n", contained.error().message.c_str());
      return 1;
    }
  } else if (argc == 3 && std::string_view(argv[1]) == "--guest") {
    // The microvm tier's guest: init builds the sandbox's world itself (guest_boot.h).
    if (bulkhead::Status booted = bulkhead::init::GuestBoot(argv[2]); !booted.ok()) {
      std::fprintf(stderr, "bulkhead-init: guest boot: %s\n", booted.error().message.c_str());
      return 1;
    }
  } else if (argc == 2 && std::string_view(argv[1]) == "--guest-template") {
    if (bulkhead::Status booted = bulkhead::init::GuestTemplate(); !booted.ok()) {
      std::fprintf(stderr, "bulkhead-init: restored guest boot: %s\n", booted.error().message.c_str());
      return 1;
    }
  } else if (argc == 2 && std::string_view(argv[1]) == "--guest-probe") {
    bulkhead::init::GuestProbe();
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: bulkhead-init [--self-contain DIR --limits JSON | --guest ARG | --guest-template | --guest-probe]\n");
    return 2;
  }
  bulkhead::init::Init init;
  return init.Run();
}
