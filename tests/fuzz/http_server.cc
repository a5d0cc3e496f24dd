// Raw bytes as the request stream of one client connection to the real ApiServer: Beast's
// parser with the server's header and body limits, the router, authentication, query
// parsing, every handler's body and query validation, and the responses, in front of a fake
// core (fake_manager.h). The connection is a unix socket to the server's own listener, so the
// accept loop and connection coroutine are the daemon's as well.
//
// The input may hold several pipelined requests; a last one asks the server to close (and
// when the input leaves a request unfinished, the client half-closes after a quiet moment).
// Checked: the server never crashes, never hangs (everything ends within seconds), always
// answers with well-formed HTTP/1.1 (no content for HEAD), and never answers 500 (the fake
// core never fails, so a 500 is an exception escaping a handler: a bug).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "fake_manager.h"
#include "fuzz_support.h"

namespace {

using namespace bulkhead;
namespace http = boost::beast::http;

constexpr auto kDeadline = std::chrono::seconds(20);

std::string g_socket_path;

int Connect() {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fuzz::Fail(std::string("socket: ") + std::strerror(errno));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, g_socket_path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    fuzz::Fail(std::string("connect: ") + std::strerror(errno));
  }
  return fd;
}

// After the input, a last request that asks the server to close: a stream of complete
// requests ends with every response and a close, as a well-behaved client's would.
constexpr std::string_view kLastRequest = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
// When the server sends nothing for this long after the input (it waits for the rest of a
// request the input cut short), the client half-closes; a server may take that for a client
// that went away.
constexpr int kQuietMs = 200;

// Sends `stream` and reads everything the server answers until it closes. Writes and reads
// interleave, so a large response never stalls a large request.
std::string Exchange(std::string_view stream) {
  const int fd = Connect();
  std::string received;
  size_t sent = 0;
  bool write_closed = false;
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  for (;;) {
    pollfd p{fd, short(POLLIN | (write_closed || sent == stream.size() ? 0 : POLLOUT)), 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) fuzz::Fail("the server did not finish the connection within 20 s");
    const bool all_sent = !write_closed && sent == stream.size();
    const int ready = ::poll(&p, 1, all_sent ? std::min<int>(kQuietMs, int(left.count())) : int(left.count()));
    if (ready < 0 && errno != EINTR) fuzz::Fail("poll");
    if (ready == 0 && all_sent) {
      ::shutdown(fd, SHUT_WR);
      write_closed = true;
      continue;
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        received.append(buf, size_t(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        break;  // the server closed (or reset) the connection
      }
    }
    if (!write_closed && sent < stream.size() && (p.revents & POLLOUT)) {
      ssize_t n = ::send(fd, stream.data() + sent, stream.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += size_t(n);
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        write_closed = true;  // the server stopped reading (it answered and closed)
      }
    }
  }
  ::close(fd);
  return received;
}

// Whether each request of the input is a HEAD, read as the server reads requests (its
// answers to HEAD carry no content, so the client must know which to expect). Up to the first
// request the server cannot parse: it answers that one and closes.
std::vector<bool> HeadRequests(std::string_view input) {
  std::vector<bool> heads;
  boost::asio::const_buffer rest(input.data(), input.size());
  while (rest.size() > 0) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    parser.eager(true);
    boost::system::error_code ec;
    size_t used = 0;
    while (!parser.is_done()) {
      const size_t n = parser.put(rest + used, ec);
      used += n;
      if (ec == http::error::need_more && n > 0 && used < rest.size()) {
        ec = {};
        continue;
      }
      break;
    }
    if (!parser.is_header_done()) break;
    heads.push_back(parser.get().method() == http::verb::head);
    if (!parser.is_done()) break;
    rest += used;
  }
  return heads;
}

// The responses, one after the other, as the server sent them.
void CheckResponses(const std::string& received, const std::vector<bool>& heads) {
  boost::asio::const_buffer rest(received.data(), received.size());
  size_t request = 0;
  while (rest.size() > 0) {
    http::response_parser<http::string_body> parser;
    parser.skip(request < heads.size() && heads[request]);
    parser.eager(true);
    parser.body_limit(64 * 1024 * 1024);
    boost::system::error_code ec;
    size_t used = 0;
    while (!parser.is_done()) {
      size_t n = parser.put(rest + used, ec);
      used += n;
      if (ec == http::error::need_more && n > 0 && used < rest.size()) {
        ec = {};
        continue;
      }
      if (!ec && n == 0) ec = http::error::need_more;
      break;
    }
    if (!parser.is_done()) {
      // A stream (chunked) ends early when the server takes the half-closed connection for a
      // client that went away (ClientHangupWatch): its last chunk is missing, which is how
      // HTTP says "incomplete". Anything else cut short or malformed is a server bug.
      const bool stream_cut = ec == http::error::need_more && parser.is_header_done() && parser.chunked();
      if (stream_cut) return;
      fuzz::Fail("the server sent a cut-off or malformed response (" + ec.message() + "): " + received);
    }
    const auto& response = parser.get();
    // HTTP/1.1, or 1.0 to a 1.0 client.
    FUZZ_CHECK(response.version() == 11 || response.version() == 10, received);
    FUZZ_CHECK(response.result_int() != 500, "an unhandled exception in a handler: " + response.body());
    if (response.result_int() == 101) return;  // what follows is the upgraded protocol's
    if (response.result_int() >= 200) ++request;  // not an interim 1xx
    rest += used;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_socket_path = fuzz::StartFakeDaemon("http");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string stream = std::string(reinterpret_cast<const char*>(data), size) + std::string(kLastRequest);
  const std::string received = Exchange(stream);
  // FUZZ_VERBOSE=1 shows what the server answered (when replaying an input).
  static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "---- response\n%s\n----\n", received.c_str());
  CheckResponses(received, HeadRequests(stream));
  return 0;
}
