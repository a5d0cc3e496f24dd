#include "cli/port_forward.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "client/api_client.h"
#include "client/daemon_socket.h"

namespace bulkhead::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

constexpr size_t kCopyBytes = 64 << 10;
constexpr size_t kMaxRefusalBytes = 1 << 20;

Error ConnectionLost(const ServerAddress& address, const std::string& during, const error_code& ec) {
  return MakeError(ErrorCode::kUnavailable,
                   "connection to the daemon at " + address.ToUrl() + " failed while " + during + ": " + ec.message(),
                   "connection_lost");
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

// The connections being forwarded, so that an interrupt can end them all.
class LiveConnections {
 public:
  void Started() {
    std::lock_guard lock(mutex_);
    ++running_;
  }
  void Ended() {
    std::lock_guard lock(mutex_);
    --running_;
    changed_.notify_all();
  }
  // A socket of a live connection; Forget it before closing it.
  void Track(int fd) {
    std::lock_guard lock(mutex_);
    fds_.insert(fd);
  }
  void Forget(int fd) {
    std::lock_guard lock(mutex_);
    fds_.erase(fd);
  }
  // Ends every connection: their blocked reads return.
  void ShutDownAll() {
    std::lock_guard lock(mutex_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  bool WaitAllEnded(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<int> fds_;
  int running_ = 0;
};

// Bytes from `from` to `to` until EOF (passed on as a half-close) or an error (which ends
// both directions).
void CopyOneWay(int from, int to) {
  std::vector<char> buffer(kCopyBytes);
  for (;;) {
    const ssize_t n = read(from, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      shutdown(to, SHUT_WR);
      return;
    }
    if (n < 0 || !SendAll(to, std::string_view(buffer.data(), size_t(n)))) {
      shutdown(from, SHUT_RDWR);
      shutdown(to, SHUT_RDWR);
      return;
    }
  }
}

struct ForwardTarget {
  HttpClient http;
  std::string sandbox_id;
  int port;
  int stderr_fd;
};

// One accepted connection, on its own thread: a tunnel, then both directions until both end.
void Forward(std::shared_ptr<LiveConnections> live, std::shared_ptr<const ForwardTarget> target, UniqueFd local) {
  Result<TcpTunnel> tunnel = OpenTcpTunnel(target->http, target->sandbox_id, target->port);
  if (!tunnel.ok()) {
    const Error& error = tunnel.error();
    (void)WriteAll(target->stderr_fd, "bulkhead: port-forward: " + error.message + " (" + CodeOf(error) + ")\n");
  } else if (SendAll(local.get(), tunnel->early)) {
    const int remote = tunnel->fd.get();
    live->Track(remote);
    std::thread upstream([&] { CopyOneWay(local.get(), remote); });
    CopyOneWay(remote, local.get());
    upstream.join();
    live->Forget(remote);
  }
  live->Forget(local.get());
  local.reset();
  live->Ended();
}

Result<UniqueFd> ListenLocal(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket", errno);
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
    Error error = SystemError("cannot listen on 127.0.0.1:" + std::to_string(port), errno);
    error.code = ErrorCode::kUnavailable;
    error.detail_code = "listen_failed";
    return error;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  return ntohs(address.sin_port);
}

}  // namespace

Result<TcpTunnel> OpenTcpTunnel(const HttpClient& http_client, const std::string& sandbox_id, int port) {
  try {
    const ServerAddress& address = http_client.address();
    asio::io_context io;
    asio::generic::stream_protocol::socket socket(io);
    BH_TRY(ConnectToDaemon(address, socket));
    http::request<http::empty_body> request{http::verb::get, SandboxPath(sandbox_id) + "/tcp/" + std::to_string(port), 11};
    request.set(http::field::host, address.HostHeader());
    request.set(http::field::user_agent, "bulkhead-cli/" BULKHEAD_VERSION);
    if (!http_client.api_key().empty()) request.set(http::field::authorization, "Bearer " + http_client.api_key());
    request.set(http::field::connection, "Upgrade");
    request.set(http::field::upgrade, "tcp");
    error_code ec;
    http::write(socket, request, ec);
    if (ec) return ConnectionLost(address, "asking for a connection", ec);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxRefusalBytes);
    http::read_header(socket, buffer, parser, ec);
    if (ec) return ConnectionLost(address, "waiting for the connection", ec);
    if (parser.get().result() != http::status::switching_protocols) {
      http::read(socket, buffer, parser, ec);  // the refusal's body says why; a cut one still has a status
      HttpResponse refusal;
      refusal.status = static_cast<int>(parser.get().result_int());
      refusal.body = parser.get().body();
      return ErrorFromResponse(refusal);
    }
    TcpTunnel tunnel;
    tunnel.early.assign(static_cast<const char*>(buffer.data().data()), buffer.size());
    socket.native_non_blocking(false, ec);
    tunnel.fd.reset(socket.release(ec));
    if (ec) return ConnectionLost(address, "taking over the connection", ec);
    return tunnel;
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal, std::string("port-forward connection failed: ") + e.what(), "client_error");
  }
}

int PortForwardCommand(Session& session) {
  const CommandLine& line = session.line;
  // An unknown sandbox is reported now, not at the first connection.
  auto sandbox = session.api.Call(HttpMethod::kGet, SandboxPath(line.sandbox_id));
  if (!sandbox.ok()) return session.Fail(sandbox.error());

  const int wanted_port = line.local_port.value_or(line.port);
  Result<UniqueFd> listener = ListenLocal(wanted_port);
  if (!listener.ok()) return session.Fail(listener.error());
  const int local_port = BoundPort(listener->get());

  // SIGINT/SIGTERM end the forwarding through a signalfd; blocked before any thread starts,
  // so none of them takes the signal instead.
  sigset_t signals, previous;
  sigemptyset(&signals);
  UniqueFd signal_fd;
  if (session.io.handle_interrupts) {
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, &previous);
    signal_fd.reset(signalfd(-1, &signals, SFD_CLOEXEC));
    if (!signal_fd) return session.Fail(SystemError("signalfd", errno));
  }

  session.Out("Forwarding 127.0.0.1:" + std::to_string(local_port) + " -> " + line.sandbox_id + ":" +
              std::to_string(line.port) + "\n");
  auto live = std::make_shared<LiveConnections>();
  auto target = std::make_shared<const ForwardTarget>(
      ForwardTarget{session.api.http(), line.sandbox_id, line.port, session.io.stderr_fd});
  int exit_code = 0;
  for (;;) {
    pollfd watched[2] = {{listener->get(), POLLIN, 0}, {signal_fd.get(), POLLIN, 0}};
    if (poll(watched, signal_fd ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      exit_code = session.Fail(SystemError("poll", errno));
      break;
    }
    if (signal_fd && watched[1].revents != 0) {
      // Ctrl-C: the normal way out. Taken off the queue, so unblocking it later is harmless.
      signalfd_siginfo taken;
      (void)!read(signal_fd.get(), &taken, sizeof(taken));
      break;
    }
    if ((watched[0].revents & POLLIN) == 0) continue;
    UniqueFd accepted(accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!accepted) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      session.Err(std::string("bulkhead: port-forward: accept: ") + std::strerror(errno) + "\n");
      usleep(100 * 1000);  // out of descriptors: do not spin
      continue;
    }
    const int one = 1;
    setsockopt(accepted.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    live->Started();
    live->Track(accepted.get());
    std::thread(Forward, live, target, std::move(accepted)).detach();
  }
  listener->reset();
  live->ShutDownAll();
  live->WaitAllEnded(std::chrono::seconds(5));
  if (session.io.handle_interrupts) pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return exit_code;
}

}  // namespace bulkhead::cli
