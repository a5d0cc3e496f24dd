#include "init/sudo_server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <optional>

#include "init/exec_request.h"
#include "init/spawn.h"
#include "init/sudo_protocol.h"
#include "init/user_db.h"

namespace bulkhead::init {
namespace {

using nlohmann::json;

// Beyond this many connections the listener waits (connecting clients queue in the backlog):
// a flood of sudo clients costs them, not init's other connections.
constexpr size_t kMaxClients = 16;
// A client must send its request this soon after connecting, or it is dropped (its slot freed).
constexpr uint64_t kRequestDeadlineMs = 10000;
// Bounds on what one request may hold.
constexpr size_t kMaxArgs = 4096;
constexpr size_t kMaxEnv = 4096;
constexpr size_t kMaxUserName = 256;
// Per event, so a client sending signals in a loop cannot hold the event loop.
constexpr int kMaxMessagesPerEvent = 64;
// Debian's secure_path.
constexpr char kSecurePath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

enum class Kind : uint64_t { kSocket = 1, kTimer = 2 };

bool IsNumeric(const std::string& text) {
  return !text.empty() && text.size() <= 10 && text.find_first_not_of("0123456789") == std::string::npos;
}

// A string array of at most `max` entries without NULs (execve cannot carry them).
std::optional<std::vector<std::string>> StringArray(const json& value, size_t max) {
  if (!value.is_array() || value.size() > max) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string()) return std::nullopt;
    const auto& text = item.get_ref<const std::string&>();
    if (text.find('\0') != std::string::npos) return std::nullopt;
    out.push_back(text);
  }
  return out;
}

bool EnvKeyIs(const std::string& entry, std::string_view key) {
  return entry.size() > key.size() && entry.compare(0, key.size(), key) == 0 && entry[key.size()] == '=';
}

// What sudo's env_reset keeps of the caller's environment (terminal and locale).
bool KeptByEnvReset(const std::string& entry) {
  for (std::string_view key : {"TERM", "COLORTERM", "COLORS", "LS_COLORS", "DISPLAY", "TZ", "LANG", "LANGUAGE"}) {
    if (EnvKeyIs(entry, key)) return true;
  }
  return entry.rfind("LC_", 0) == 0 && entry.find('=') != std::string::npos;
}

// sudo -s / -i with a command: the arguments joined for `shell -c`, every character but
// alphanumerics, '_', '-' and '$' escaped with a backslash, as sudo does.
std::string ShellCommand(const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) out += ' ';
    for (char c : args[i]) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '$') out += '\\';
      out += c;
    }
  }
  return out;
}

std::string Join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& arg : args) {
    if (!out.empty()) out += ' ';
    out += arg;
  }
  return out;
}

std::string NameOf(uid_t uid) {
  auto user = ResolveUser(std::to_string(uid));
  return user.ok() && !user->name.empty() ? user->name : std::to_string(uid);
}

// A line for the client to print, cut to fit its buffer (a path in it may be long).
std::string ErrorReply(const std::string& line) {
  return json{{"error", line.substr(0, 1024)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

struct SudoServer::Client {
  uint64_t id = 0;
  PolledFd socket;
  PolledFd timer;
  ucred peer{};  // from its request (SCM_CREDENTIALS)
  pid_t pid = -1;  // the command, once started (also its process group)
};

SudoServer::SudoServer(Poller& poller) : poller_(poller) {}

SudoServer::~SudoServer() { KillAll(); }

bool SudoServer::Allow(std::vector<std::string> allowed) {
  allowed_ = std::move(allowed);  // requests that come from now on are checked against it
  return listener_.fd || Listen();
}

bool SudoServer::Listen() {
  // Only init may make or replace the socket: its directory must be init's and not writable
  // by anyone else (a sandbox user could otherwise put a socket of their own there), and
  // /run must not let others rename it away (an image with a world-writable /run: sticky).
  struct stat run;
  if (::lstat("/run", &run) != 0 || !S_ISDIR(run.st_mode) || run.st_uid != ::getuid() ||
      ((run.st_mode & 022) != 0 && (run.st_mode & S_ISVTX) == 0)) {
    std::fprintf(stderr, "bulkhead-init: others may rename what /run holds: no sudo socket\n");
    return false;
  }
  if (::mkdir(kSudoSocketDir, 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "bulkhead-init: mkdir %s: %s\n", kSudoSocketDir, std::strerror(errno));
    return false;
  }
  struct stat dir;
  if (::lstat(kSudoSocketDir, &dir) != 0 || !S_ISDIR(dir.st_mode) || dir.st_uid != ::getuid() ||
      (dir.st_mode & 022) != 0) {
    std::fprintf(stderr, "bulkhead-init: %s is not a directory only init may write\n", kSudoSocketDir);
    return false;
  }
  ::unlink(kSudoSocketPath);  // a previous boot's
  listener_.fd.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int on = 1;  // the clients' credentials come with their requests (Accept)
  if (listener_.fd) (void)::setsockopt(listener_.fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, kSudoSocketPath, sizeof(address.sun_path) - 1);
  if (!listener_.fd || ::bind(listener_.fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::chmod(kSudoSocketPath, 0666) != 0 || ::listen(listener_.fd.get(), 64) != 0) {
    std::fprintf(stderr, "bulkhead-init: sudo socket %s: %s\n", kSudoSocketPath, std::strerror(errno));
    listener_.fd.reset();
    return false;
  }
  accept_backoff_.Start(poller_, kTokenBit | uint64_t(Kind::kTimer));  // client id 0: the listener's
  UpdateListener();
  return true;
}

bool SudoServer::Allowed(uid_t uid) const {
  if (uid == 0) return true;  // root gains nothing
  for (const auto& entry : allowed_) {
    if (IsNumeric(entry)) {
      if (std::to_string(uid) == entry) return true;
      continue;
    }
    auto user = ResolveUser(entry);
    if (user.ok() && user->uid == uid) return true;
  }
  return false;
}

void SudoServer::UpdateListener() {
  const bool accepting = clients_.size() < kMaxClients && !accept_backoff_.paused();
  poller_.Watch(listener_, kTokenBit, accepting ? uint32_t(EPOLLIN) : 0u);
}

void SudoServer::Accept() {
  while (clients_.size() < kMaxClients) {
    UniqueFd fd(::accept4(listener_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      accept_backoff_.Pause(errno);  // until a client leaves, or a moment passes
      break;
    }
    // Who the client is comes with its request (SCM_CREDENTIALS, filled in by the kernel):
    // gVisor answers SO_PEERCRED on an accepted SOCK_SEQPACKET socket with the listener's.
    const int on = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) continue;
    auto client = std::make_unique<Client>();
    client->id = next_id_++;
    client->socket.fd = std::move(fd);
    ArmTimer(client->timer, kRequestDeadlineMs);
    const uint64_t base = kTokenBit | (client->id << 8);
    poller_.Watch(client->socket, base | uint64_t(Kind::kSocket), EPOLLIN | EPOLLRDHUP);
    poller_.Watch(client->timer, base | uint64_t(Kind::kTimer), EPOLLIN);
    clients_.emplace(client->id, std::move(client));
  }
  UpdateListener();
}

void SudoServer::OnEvent(uint64_t token) {
  uint64_t id = (token & ~kTokenBit) >> 8;
  if (id == 0) {
    if (Kind(token & 0xff) == Kind::kTimer) accept_backoff_.OnTimer();
    return Accept();
  }
  auto it = clients_.find(id);
  if (it == clients_.end()) return;  // a stale event
  Client& client = *it->second;
  if (Kind(token & 0xff) == Kind::kTimer) {
    if (client.pid < 0) Remove(id);  // no request in time
    return;
  }
  if (client.pid < 0) {
    HandleRequest(client);
  } else {
    HandleSignalMessage(client);
  }
}

void SudoServer::Reply(Client& client, const std::string& json_text) {
  ::send(client.socket.fd.get(), json_text.data(), json_text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void SudoServer::HandleRequest(Client& client) {
  std::string buffer(kSudoMaxRequestBytes + 1, '\0');
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(ucred))];
  iovec iov{buffer.data(), buffer.size()};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(client.socket.fd.get(), &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) return Remove(client.id);

  // Every descriptor that came along is ours to close, whatever the request turns out to be.
  std::vector<UniqueFd> fds;
  bool identified = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof(ucred))) {
      std::memcpy(&client.peer, CMSG_DATA(c), sizeof(ucred));
      identified = true;
      continue;
    }
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  auto refuse = [&](const std::string& line) {
    Reply(client, ErrorReply(line));
    Remove(client.id);
  };
  // Read, not trusted: closing with the request unread would reset the connection before
  // the client saw the answer.
  if (!identified) return refuse("sudo: bad request: no credentials came with it");
  if (!Allowed(client.peer.uid)) return refuse(NameOf(client.peer.uid) + " is not in the sudoers file.");
  if (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return refuse("sudo: request too large");
  if (fds.size() != 3) return refuse("sudo: bad request: stdin, stdout and stderr must come with it");

  json doc = json::parse(std::string_view(buffer.data(), size_t(n)), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return refuse("sudo: bad request: not a JSON object");
  auto args = StringArray(doc.value("argv", json::array()), kMaxArgs);
  auto env = StringArray(doc.value("env", json::array()), kMaxEnv);
  const json mode_value = doc.value("mode", json("command"));
  const json user_value = doc.value("user", json("root"));
  const json cwd_value = doc.value("cwd", json("/"));
  const json preserve_value = doc.value("preserve_env", json(false));
  if (!args || !env || !mode_value.is_string() || !user_value.is_string() || !cwd_value.is_string() ||
      !preserve_value.is_boolean()) {
    return refuse("sudo: bad request: a field of the wrong kind");
  }
  const std::string mode = mode_value.get<std::string>();
  const std::string target_name = user_value.get<std::string>();
  const std::string& requested_cwd = cwd_value.get_ref<const std::string&>();
  if (mode != "command" && mode != "shell" && mode != "login") return refuse("sudo: bad request: unknown mode");
  if (mode == "command" && args->empty()) return refuse("sudo: bad request: no command");
  if (target_name.empty() || target_name.size() > kMaxUserName || target_name.find(':') != std::string::npos ||
      target_name.find('\0') != std::string::npos) {
    return refuse("sudo: unknown user " + target_name);
  }
  if (requested_cwd.empty() || requested_cwd[0] != '/' || requested_cwd.find('\0') != std::string::npos) {
    return refuse("sudo: bad request: cwd must be an absolute path");
  }

  auto target = ResolveUser(target_name);
  if (!target.ok()) return refuse("sudo: unknown user " + target_name);

  ExecRequest request;
  request.user = std::to_string(target->uid);
  request.cwd = mode == "login" ? target->home : requested_cwd;
  if (mode == "command") {
    request.argv = *args;
  } else {
    std::string shell = target->shell;
    if (mode == "shell") {
      for (const auto& entry : *env) {
        if (EnvKeyIs(entry, "SHELL") && entry.size() > 6) shell = entry.substr(6);
      }
    }
    request.argv = {shell};
    if (mode == "login") request.argv.push_back("-l");
    if (!args->empty()) {
      request.argv.push_back("-c");
      request.argv.push_back(ShellCommand(*args));
    }
  }

  // sudo's env_reset: a fresh environment of the target, or the caller's with -E; either way
  // the secure PATH and the SUDO_* variables.
  const std::string target_label = target->name.empty() ? std::to_string(target->uid) : target->name;
  for (const auto& entry : *env) {
    if (entry.find('=') == std::string::npos || EnvKeyIs(entry, "PATH") || entry.rfind("SUDO_", 0) == 0) continue;
    if (preserve_value.get<bool>() || KeptByEnvReset(entry)) request.env.push_back(entry);
  }
  auto set = [&request](const std::string& key, const std::string& value) {
    std::erase_if(request.env, [&](const std::string& entry) { return EnvKeyIs(entry, key); });
    request.env.push_back(key + "=" + value);
  };
  request.env.push_back(kSecurePath);
  if (!preserve_value.get<bool>() || mode == "login") set("HOME", target->home);
  set("USER", target_label);
  set("LOGNAME", target_label);
  if (!preserve_value.get<bool>() || mode != "command") set("SHELL", target->shell);
  set("SUDO_USER", NameOf(client.peer.uid));
  set("SUDO_UID", std::to_string(client.peer.uid));
  set("SUDO_GID", std::to_string(client.peer.gid));
  set("SUDO_COMMAND", Join(request.argv));

  // The caller's own descriptor limit (the daemon sized it to the sandbox): not init's.
  struct rlimit nofile;
  if (::prlimit(client.peer.pid, RLIMIT_NOFILE, nullptr, &nofile) == 0 && nofile.rlim_max != RLIM_INFINITY) {
    request.nofile = nofile.rlim_max;
  }

  const int stdio[3] = {fds[0].get(), fds[1].get(), fds[2].get()};
  auto command = SpawnCommand(request, stdio);
  if (!command.ok()) return refuse("sudo: " + command.error().message);
  client.pid = command->pid;
  poller_.Close(client.timer);
}

void SudoServer::HandleSignalMessage(Client& client) {
  for (int i = 0; i < kMaxMessagesPerEvent; ++i) {
    char buffer[256];
    ssize_t n = ::recv(client.socket.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return Remove(client.id);  // the client is gone: so is its command
    json doc = json::parse(std::string_view(buffer, size_t(n)), nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("signal") || !doc["signal"].is_number_integer()) continue;
    int64_t signal = doc["signal"].get<int64_t>();
    if (signal >= 1 && signal <= 64) ::kill(-client.pid, int(signal));
  }
}

bool SudoServer::OnChildExit(pid_t pid, int wait_status) {
  for (auto& [id, client] : clients_) {
    if (client->pid != pid) continue;
    json reply = WIFSIGNALED(wait_status) ? json{{"signal", WTERMSIG(wait_status)}}
                                           : json{{"exit_code", WEXITSTATUS(wait_status)}};
    Reply(*client, reply.dump());
    client->pid = 0;  // reaped: never signalled again
    Remove(id);
    return true;
  }
  return false;
}

void SudoServer::Remove(uint64_t id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& client = *it->second;
  // Not yet reaped, so the process group cannot have been reused.
  if (client.pid > 0) ::kill(-client.pid, SIGKILL);
  poller_.Close(client.socket);
  poller_.Close(client.timer);
  clients_.erase(it);
  accept_backoff_.Resume();
  UpdateListener();
}

void SudoServer::KillAll() {
  for (auto& [id, client] : clients_) {
    if (client->pid > 0) ::kill(-client->pid, SIGKILL);
  }
}

}  // namespace bulkhead::init
