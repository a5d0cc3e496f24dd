// The `sudo` of a sandbox: bulkhead-init run under that name (the host image's usr/bin/sudo).
// It cannot gain anything itself (no_new_privs, nosuid), so it asks init over the sudo socket
// (sudo_protocol.h) to run the command, hands over its stdin/stdout/stderr, forwards the
// signals it gets and exits as the command did.
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "init/sudo_protocol.h"

extern char** environ;

namespace bulkhead::init {
namespace {

using nlohmann::json;

constexpr char kUsage[] =
    "usage: sudo [-EHns] [-u user] [--] command [arg ...]\n"
    "usage: sudo -i [-En] [-u user] [--] [command [arg ...]]\n"
    "usage: sudo -s [-En] [-u user] [--] [command [arg ...]]\n";

int Usage() {
  std::fputs(kUsage, stderr);
  return 1;
}

int Fail(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  return 1;
}

bool SendRequest(int socket, const std::string& payload) {
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)] = {};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&message);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * 3);
  const int stdio[3] = {0, 1, 2};
  std::memcpy(CMSG_DATA(c), stdio, sizeof(stdio));
  while (true) {
    if (::sendmsg(socket, &message, MSG_NOSIGNAL) >= 0) return true;
    if (errno != EINTR) return false;
  }
}

volatile sig_atomic_t pending_signals[65];

void NoteSignal(int signal) { pending_signals[signal] = 1; }

}  // namespace

int SudoClientMain(int argc, char** argv) {
  std::string user = "root";
  std::string mode = "command";
  bool preserve_env = false;
  static const option kOptions[] = {{"user", required_argument, nullptr, 'u'},
                                    {"preserve-env", no_argument, nullptr, 'E'},
                                    {"non-interactive", no_argument, nullptr, 'n'},
                                    {"login", no_argument, nullptr, 'i'},
                                    {"shell", no_argument, nullptr, 's'},
                                    {"set-home", no_argument, nullptr, 'H'},
                                    {"help", no_argument, nullptr, 'h'},
                                    {nullptr, 0, nullptr, 0}};
  // '+': options end at the command, as with sudo.
  int option;
  while ((option = ::getopt_long(argc, argv, "+u:EnisHh", kOptions, nullptr)) != -1) {
    switch (option) {
      case 'u':
        user = optarg;
        if (!user.empty() && user[0] == '#') user = user.substr(1);  // sudo's "#uid"
        break;
      case 'E': preserve_env = true; break;
      case 'n': break;  // never prompts: there is no password
      case 'H': break;  // HOME is the target's already
      case 'i':
      case 's':
        if (mode != "command") return Fail("sudo: you may not specify both the -i and -s options");
        mode = option == 'i' ? "login" : "shell";
        break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: return Usage();  // getopt printed what was wrong
    }
  }
  json args = json::array();
  for (int i = optind; i < argc; ++i) args.push_back(argv[i]);
  if (mode == "command" && args.empty()) return Usage();

  char cwd[PATH_MAX];
  json env = json::array();
  for (char** entry = environ; *entry; ++entry) env.push_back(*entry);
  json request = {{"argv", args},
                  {"cwd", ::getcwd(cwd, sizeof(cwd)) ? cwd : "/"},
                  {"user", user},
                  {"mode", mode},
                  {"preserve_env", preserve_env},
                  {"env", env}};
  std::string payload = request.dump(-1, ' ', false, json::error_handler_t::replace);
  if (payload.size() > kSudoMaxRequestBytes) return Fail("sudo: unable to execute command: Argument list too long");

  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, kSudoSocketPath, sizeof(address.sun_path) - 1);
  if (!socket || ::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) {
      return Fail("sudo: this sandbox has no sudo (its spec names no sudo_users)");
    }
    return Fail(std::string("sudo: ") + kSudoSocketPath + ": " + std::strerror(errno));
  }

  // What a sudo relays to its command; the rest keep their defaults. Blocked except inside
  // ppoll, so none arrives unseen between a check and the wait.
  struct sigaction relay {};
  relay.sa_handler = NoteSignal;
  sigset_t relayed, waiting;
  ::sigemptyset(&relayed);
  for (int signal : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT}) {
    ::sigaction(signal, &relay, nullptr);
    ::sigaddset(&relayed, signal);
  }
  ::sigprocmask(SIG_BLOCK, &relayed, &waiting);
  for (int signal = 1; signal < 65; ++signal) {
    if (::sigismember(&relayed, signal)) ::sigdelset(&waiting, signal);
  }
  if (!SendRequest(socket.get(), payload)) return Fail(std::string("sudo: send request: ") + std::strerror(errno));

  while (true) {
    for (int signal = 1; signal <= 64; ++signal) {
      if (!pending_signals[signal]) continue;
      pending_signals[signal] = 0;
      std::string message = json{{"signal", signal}}.dump();
      ::send(socket.get(), message.data(), message.size(), MSG_NOSIGNAL);
    }
    pollfd readable{socket.get(), POLLIN, 0};
    if (::ppoll(&readable, 1, nullptr, &waiting) < 0) {
      if (errno == EINTR) continue;  // a signal to relay
      return Fail(std::string("sudo: poll: ") + std::strerror(errno));
    }
    char buffer[4096];
    ssize_t n = ::recv(socket.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return Fail("sudo: lost the connection to init");
    json reply = json::parse(std::string_view(buffer, size_t(n)), nullptr, /*allow_exceptions=*/false);
    if (!reply.is_object()) return Fail("sudo: bad reply from init");
    if (reply.contains("error") && reply["error"].is_string()) return Fail(reply["error"].get<std::string>());
    if (reply.contains("signal") && reply["signal"].is_number_integer()) return 128 + reply["signal"].get<int>();
    if (reply.contains("exit_code") && reply["exit_code"].is_number_integer()) return reply["exit_code"].get<int>();
    return Fail("sudo: bad reply from init");
  }
}

}  // namespace bulkhead::init
