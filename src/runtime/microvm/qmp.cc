#include "runtime/microvm/qmp.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "common/send_fd.h"

namespace bulkhead::runtime::microvm {
namespace {
using nlohmann::json;

// How long one command may take (a template's save runs for about a second under TCG).
constexpr auto kCommandTakes = std::chrono::seconds(60);

Error Failed(const std::string& what) { return MakeError(ErrorCode::kInternal, "qmp: " + what); }

}  // namespace

Result<UniqueFd> ConnectWhenListening(const std::string& path, pid_t pid,
                                      std::chrono::steady_clock::time_point deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Failed("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (int attempt = 0;; attempt++) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return SystemError("socket", errno);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    if (::kill(pid, 0) != 0) return Failed("QEMU exited before it listened at " + path);
    if (std::chrono::steady_clock::now() > deadline) return Failed("nothing listens at " + path);
    std::this_thread::sleep_for(std::chrono::microseconds(attempt < 200 ? 250 : 5000));
  }
}

Result<Qmp> Qmp::Connect(const std::string& path, pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto socket = ConnectWhenListening(path, pid, deadline);
  if (!socket) return socket.error();
  Qmp qmp(std::move(*socket));
  qmp.deadline_ = deadline;
  auto greeting = qmp.ReadMessage();
  if (!greeting) return greeting.error();
  if (!greeting->contains("QMP")) return Failed("no greeting: " + greeting->dump());
  auto negotiated = qmp.Execute("qmp_capabilities");
  if (!negotiated) return negotiated.error();
  return qmp;
}

Result<json> Qmp::Execute(const std::string& command, const json& arguments, int fd) {
  deadline_ = std::chrono::steady_clock::now() + kCommandTakes;
  json request = {{"execute", command}};
  if (!arguments.empty()) request["arguments"] = arguments;
  const std::string line = request.dump() + "\n";
  if (SendWithFd(socket_.get(), line, fd) != static_cast<ssize_t>(line.size()))
    return SystemError("qmp: send " + command, errno);
  while (true) {
    auto reply = ReadMessage();
    if (!reply) return reply.error();
    if (reply->contains("event")) {
      Keep(std::move(*reply));
      continue;
    }
    if (auto error = reply->find("error"); error != reply->end())
      return Failed(command + ": " + error->value("desc", error->dump()));
    if (auto value = reply->find("return"); value != reply->end()) return *value;
    return Failed(command + ": unexpected reply " + reply->dump());
  }
}

void Qmp::Keep(json event) {
  constexpr size_t kKeptEvents = 64;  // (what is waited for comes within a few)
  if (events_.size() == kKeptEvents) events_.erase(events_.begin());
  events_.push_back(std::move(event));
}

Status Qmp::WaitForDeviceDeleted(const std::string& id, std::chrono::milliseconds timeout) {
  deadline_ = std::chrono::steady_clock::now() + timeout;
  while (true) {
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (it->value("event", "") != "DEVICE_DELETED") continue;
      const json& data = (*it)["data"];
      if (data.is_object() && data.value("device", "") == id) {
        events_.erase(it);
        return {};
      }
    }
    auto message = ReadMessage();
    if (!message) return message.error();
    if (message->contains("event")) Keep(std::move(*message));
  }
}

Status Qmp::IgnoreSharedMemory() {
  const json capability = {{"capability", "x-ignore-shared"}, {"state", true}};
  BH_TRY(Execute("migrate-set-capabilities", {{"capabilities", json::array({capability})}}));
  return {};
}

Status Qmp::AwaitSaved(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    auto state = Execute("query-migrate");
    if (!state) return state.error();
    const std::string status = state->value("status", "");
    if (status == "completed") return {};
    if (status == "failed" || status == "cancelled") return Failed("saving failed: " + state->value("error-desc", status));
    if (std::chrono::steady_clock::now() > deadline) return Failed("saving took too long");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Status Qmp::AwaitLoaded(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    auto state = Execute("query-status");
    if (!state) return state.error();
    const std::string status = state->value("status", "");
    if (status == "paused") return {};
    if (status != "inmigrate") return Failed("the restored guest is " + status + ", not paused");
    if (std::chrono::steady_clock::now() > deadline) return Failed("the saved state did not load in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Result<json> Qmp::ReadMessage() {
  while (true) {
    if (const size_t end = buffer_.find('\n'); end != std::string::npos) {
      json message = json::parse(buffer_.substr(0, end), nullptr, /*allow_exceptions=*/false);
      buffer_.erase(0, end + 1);
      if (!message.is_object()) return Failed("not a JSON object");
      return message;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Failed("no answer in time");
    pollfd p{socket_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return SystemError("qmp: poll", errno);
    if (ready == 0) continue;
    char chunk[4096];
    const ssize_t n = ::read(socket_.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Failed("QEMU closed its monitor");
    buffer_.append(chunk, static_cast<size_t>(n));
    if (buffer_.size() > (1 << 20)) return Failed("an answer over 1 MiB");
  }
}

}  // namespace bulkhead::runtime::microvm
