#include "oci/pod_egress.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>

#include "common/unique_fd.h"
#include "net/allow_rules.h"
#include "net/egress_proxy.h"
#include "net/netns.h"
#include "runtime/process.h"

namespace bulkhead::oci {
namespace {

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t first = item.find_first_not_of(" \t\n"), last = item.find_last_not_of(" \t\n");
    if (first != std::string::npos) out.push_back(item.substr(first, last - first + 1));
  }
  return out;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

std::string Annotation(const std::map<std::string, std::string>& annotations, const std::string& key) {
  auto it = annotations.find(key);
  return it == annotations.end() ? "" : it->second;
}

// A name made of what the CRI says of the pod, safe as a file name.
std::string LogName(const std::string& pod, const std::map<std::string, std::string>& annotations) {
  std::string name;
  for (const char* key : {"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name"}) {
    std::string part = Annotation(annotations, key);
    for (char& c : part)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
    if (!part.empty()) name += part + "_";
  }
  return name + pod + ".jsonl";
}

// The log as JSON lines: a line per decision (id, ...) and one more when an allowed connection
// ends (its id, bytes and duration).
class JsonLinesSink : public net::EgressSink {
 public:
  JsonLinesSink(UniqueFd fd, std::string pod) : fd_(std::move(fd)), pod_(std::move(pod)) {}
  int64_t Begin(const net::EgressRecord& record) override {
    std::lock_guard lock(mu_);
    nlohmann::json line = net::EgressRecordToJson(record);
    line["id"] = ++next_;
    line["pod"] = pod_;
    Write(line);
    return next_;
  }
  void Finish(int64_t id, int64_t bytes_out, int64_t bytes_in, int64_t duration_ms, const std::string& reason) override {
    std::lock_guard lock(mu_);
    Write({{"id", id}, {"pod", pod_}, {"finished", true}, {"bytes_out", bytes_out}, {"bytes_in", bytes_in},
           {"duration_ms", duration_ms}, {"reason", reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(reason)}});
  }

 private:
  void Write(const nlohmann::json& line) {
    const std::string text = line.dump() + "\n";
    (void)!::write(fd_.get(), text.data(), text.size());
  }
  UniqueFd fd_;
  std::string pod_;
  std::mutex mu_;
  int64_t next_ = 0;
};

}  // namespace

Result<std::optional<EgressSettings>> PodEgressSettings(const std::map<std::string, std::string>& annotations) {
  const std::string mode = Annotation(annotations, kEgressModeAnnotation);
  if (mode.empty()) {
    if (!Annotation(annotations, kEgressAllowAnnotation).empty() || !Annotation(annotations, kEgressDenyAnnotation).empty())
      return MakeError(ErrorCode::kInvalid, std::string(kEgressAllowAnnotation) + " and " + kEgressDenyAnnotation +
                                                " need " + kEgressModeAnnotation);
    return std::optional<EgressSettings>{};
  }
  EgressSettings settings{mode, SplitList(Annotation(annotations, kEgressAllowAnnotation)),
                          SplitList(Annotation(annotations, kEgressDenyAnnotation))};
  auto policy = net::ParsePolicy(settings.mode, settings.allow, settings.deny);
  if (!policy.ok()) return MakeError(ErrorCode::kInvalid, "pod egress annotations: " + policy.error().message);
  return std::optional<EgressSettings>(std::move(settings));
}

Result<runtime::SandboxHandle> StartEgressHelper(const std::string& pod, const std::string& netns,
                                       const std::map<std::string, std::string>& annotations,
                                       const EgressSettings& settings) {
  const char* dir_variable = std::getenv(kEgressLogDirVariable);
  const std::string dir = dir_variable && *dir_variable ? dir_variable : kEgressLogDir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return MakeError(ErrorCode::kInternal, "mkdir " + dir + ": " + error.message());
  const std::string log = dir + "/" + LogName(pod, annotations);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return SystemError("pipe", errno);
  UniqueFd ready_read(pipe_fds[0]), ready_write(pipe_fds[1]);
  const std::vector<std::string> args = {"bulkhead-oci", "egress",  "--pod",   pod,
                                         "--netns",      netns,     "--mode",  settings.mode,
                                         "--allow",      Join(settings.allow), "--deny", Join(settings.deny),
                                         "--log",        log,       "--ready-fd", "3"};
  // Its own session, a grandchild: it outlives this `create` (the runc shim, a subreaper,
  // becomes its parent), as long as the pod.
  pid_t child = ::fork();
  if (child < 0) return SystemError("fork", errno);
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) _exit(0);
    ::dup2(ready_write.get(), 3);
    ::fcntl(3, F_SETFD, 0);  // (it may have been 3 already, still close-on-exec)
    // Nothing of the container's stdio (the shim's pipes, which `create` was given) stays open.
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd : {0, 1, 2}) ::dup2(null, fd);
    ::syscall(SYS_close_range, 4, ~0U, 0);
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  ::waitpid(child, nullptr, 0);
  ready_write.reset();
  std::string said;
  char buffer[1024];
  for (ssize_t n; (n = ::read(ready_read.get(), buffer, sizeof buffer)) > 0;) said.append(buffer, static_cast<size_t>(n));
  const size_t space = said.find(' ');
  if (said.rfind("ok ", 0) != 0 || space == std::string::npos)
    return MakeError(ErrorCode::kInternal, "the pod's egress helper did not start" + (said.empty() ? "" : ": " + said));
  return runtime::HandleOf(static_cast<pid_t>(std::stol(said.substr(space + 1))));
}

void StopEgressHelper(const runtime::SandboxHandle& helper) {
  if (!runtime::HandleAlive(helper)) return;
  ::kill(helper.pid, SIGTERM);
  for (int i = 0; i < 200 && runtime::HandleAlive(helper); i++) ::usleep(10000);
  if (runtime::HandleAlive(helper)) ::kill(helper.pid, SIGKILL);
}

int RunEgressHelper(const std::string& pod, const std::string& netns, const EgressSettings& settings,
                    const std::string& log, int ready_fd) {
  auto report = [&](const std::string& line) {
    const std::string text = line + "\n";
    (void)!::write(ready_fd, text.data(), text.size());
  };
  auto policy = net::ParsePolicy(settings.mode, settings.allow, settings.deny);
  if (!policy.ok()) return report(policy.error().message), 1;
  // SIGTERM and SIGINT are taken by sigwait below, on this thread; the proxy's threads inherit the mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  UniqueFd netns_fd(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns_fd) return report("open " + netns + ": " + std::strerror(errno)), 1;
  UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!log_fd) return report("open " + log + ": " + std::strerror(errno)), 1;
  JsonLinesSink sink(std::move(log_fd), pod);
  net::EgressProxyOptions options;
  if (const char* servers = std::getenv(kEgressDnsVariable)) options.dns_servers = SplitList(servers);
  auto proxy = net::EgressProxy::Start(options, sink);
  if (!proxy.ok()) return report(proxy.error().message), 1;
  auto listeners = net::ConfigurePodNetns(netns_fd.get());
  if (!listeners.ok()) return report(listeners.error().message), 1;
  (*proxy)->Attach(pod, std::move(*listeners), *policy);
  report("ok " + std::to_string(::getpid()));
  ::close(ready_fd);
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;
}

}  // namespace bulkhead::oci
