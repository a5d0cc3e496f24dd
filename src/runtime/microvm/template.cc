#include "runtime/microvm/template.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/ctl_protocol.h"
#include "common/read_file.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "runtime/microvm/qmp.h"

extern char** environ;

namespace bulkhead::runtime::microvm {
namespace {

// A template boots as a cold guest does (~2-4 s under TCG), longer on a loaded host.
constexpr auto kTemplateBoots = std::chrono::seconds(120);

Error BuildFailed(const std::string& what, const std::string& log) {
  return MakeError(ErrorCode::kInternal, "template guest: " + what + ": " + ReadLogTail(log, 1000));
}

// Reads the boot port until the template's sign (its init waits).
Status WaitForSign(int port, std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& stopping) {
  std::string seen;
  while (seen.find(ctl::kGuestTemplateSign) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return MakeError(ErrorCode::kInternal, "its init did not wait in time");
    if (stopping) return MakeError(ErrorCode::kUnavailable, "the daemon stops");
    pollfd p{port, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char chunk[256];
    const ssize_t n = ::read(port, chunk, sizeof chunk);
    if (n <= 0) return MakeError(ErrorCode::kInternal, "its boot port closed");
    seen.append(chunk, static_cast<size_t>(n));
    if (seen.size() > 4096) seen.erase(0, seen.size() - 256);
  }
  return {};
}


}  // namespace

std::string GuestShape::Name() const { return std::to_string(memory_mb) + "m-" + std::to_string(vcpus) + "cpu"; }

Status BuildTemplate(const VmConfig& vm, const std::string& saved, const std::string& log,
                     const std::atomic<bool>& stopping) {
  const std::vector<std::string> args = QemuArgs(vm);
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!log_fd) return SystemError("create " + log, errno);
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_fd) return SystemError("open /dev/null", errno);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return SystemError("fork", errno);
  if (pid == 0) {
    // QEMU dies with this thread, i.e. with the daemon however it ends (a SIGKILL included):
    // nothing else would end a template whose daemon is gone. (Hence no -runas: a change of
    // uid clears the parent-death signal.) Async-signal-safe calls only, after fork.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
    if (::dup2(null_fd.get(), 0) < 0 || ::dup2(log_fd.get(), 1) < 0 || ::dup2(log_fd.get(), 2) < 0) ::_exit(126);
    ::execve(argv[0], argv.data(), environ);
    ::_exit(127);
  }
  ScopeGuard reap([&] {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  });

  const auto deadline = std::chrono::steady_clock::now() + kTemplateBoots;
  auto port = ConnectWhenListening(vm.boot_port_socket, pid, deadline);
  if (!port) return BuildFailed(port.error().message, log);
  if (Status waited = WaitForSign(port->get(), deadline, stopping); !waited.ok()) return BuildFailed(waited.error().message, log);
  auto qmp = Qmp::Connect(vm.qmp_socket, pid, std::chrono::seconds(10));
  if (!qmp) return BuildFailed(qmp.error().message, log);
  const std::string partial = saved + ".partial";
  UniqueFd out(::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return SystemError("create " + partial, errno);
  ScopeGuard remove_partial([&] { ::unlink(partial.c_str()); });
  // Stopped first: a copy restores paused, and runs once its devices are in. The guest's
  // memory stays in its file, which each copy gets a copy of.
  if (auto stopped = qmp->Execute("stop"); !stopped) return BuildFailed(stopped.error().message, log);
  if (Status ignored = qmp->IgnoreSharedMemory(); !ignored.ok()) return BuildFailed(ignored.error().message, log);
  if (auto passed = qmp->Execute("getfd", {{"fdname", "saved"}}, out.get()); !passed)
    return BuildFailed(passed.error().message, log);
  if (auto started = qmp->Execute("migrate", {{"uri", "fd:saved"}}); !started) return BuildFailed(started.error().message, log);
  if (Status saved_all = qmp->AwaitSaved(deadline); !saved_all.ok()) return BuildFailed(saved_all.error().message, log);
  if (::fsync(out.get()) != 0) return SystemError("fsync " + partial, errno);
  if (::rename(partial.c_str(), saved.c_str()) != 0) return SystemError("rename " + partial, errno);
  remove_partial.Dismiss();
  (void)qmp->Execute("quit");
  return {};
}

Result<UniqueFd> StartCopy(const VmConfig& vm, pid_t pid, const std::string& boot_line,
                           std::chrono::steady_clock::time_point deadline) {
  auto qmp = Qmp::Connect(vm.qmp_socket, pid, std::chrono::seconds(30));
  if (!qmp) return qmp.error();
  // QEMU loads the saved state ("inmigrate"); the template was saved stopped, so is the copy.
  BH_TRY(qmp->IgnoreSharedMemory());
  if (auto loading = qmp->Execute("migrate-incoming", {{"uri", "fd:" + std::to_string(vm.incoming_fd)}}); !loading)
    return loading.error();
  BH_TRY(qmp->AwaitLoaded(deadline));
  for (const nlohmann::json& device : HotplugDevices(vm))
    if (auto added = qmp->Execute("device_add", device); !added) return added.error();
  if (auto resumed = qmp->Execute("cont"); !resumed) return resumed.error();
  auto port = ConnectWhenListening(vm.boot_port_socket, pid, deadline);
  if (!port) return port.error();
  const std::string line = boot_line + "\n";
  if (::send(port->get(), line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return SystemError("send the restored guest its boot message", errno);
  return std::move(*port);
}

Templates::~Templates() {
  stopping_ = true;
  std::lock_guard lock(mu_);
  for (auto& [shape, build] : builds_) build.wait();
}

std::optional<std::string> Templates::Ready(const GuestShape& shape) {
  std::lock_guard lock(mu_);
  auto it = builds_.find(shape);
  if (it == builds_.end()) {
    builds_[shape] = std::async(std::launch::async, build_, shape, std::cref(stopping_)).share();
    return std::nullopt;
  }
  if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return std::nullopt;
  const Result<std::string>& built = it->second.get();
  if (!built) return std::nullopt;
  return *built;
}

std::optional<std::string> Templates::Wait(const GuestShape& shape, std::chrono::steady_clock::time_point deadline) {
  std::shared_future<Result<std::string>> build;
  {
    std::lock_guard lock(mu_);
    auto it = builds_.find(shape);
    if (it == builds_.end())
      it = builds_.emplace(shape, std::async(std::launch::async, build_, shape, std::cref(stopping_)).share()).first;
    build = it->second;
  }
  if (build.wait_until(deadline) != std::future_status::ready) return std::nullopt;
  const Result<std::string>& built = build.get();
  if (!built) return std::nullopt;
  return *built;
}

std::vector<std::pair<std::string, std::string>> Templates::States() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> states;
  for (const auto& [shape, build] : builds_) {
    std::string state = "building";
    if (build.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
      state = build.get() ? "ready" : "failed: " + build.get().error().message;
    states.emplace_back(shape.Name(), state);
  }
  return states;
}

}  // namespace bulkhead::runtime::microvm
