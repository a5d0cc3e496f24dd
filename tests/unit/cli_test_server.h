// A throwaway HTTP server for the CLI's tests: a real Beast server on a unix socket (or
// loopback TCP) in its own threads, answering each request with a handler the test writes.
// It stands in for the daemon's HTTP surface only, so the client's real HTTP code runs.
#pragma once
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bulkhead::cli::testing {

struct RecordedRequest {
  std::string method;
  std::string target;
  std::string content_type;
  std::string authorization;
  std::string accept;
  std::string host;
  bool chunked = false;
  std::string body;
};

// The server side of one exchange: helpers write raw HTTP, so tests control chunking
// and timing exactly.
class Reply {
 public:
  explicit Reply(boost::asio::generic::stream_protocol::socket& socket) : socket_(socket) {}

  void Json(int status, const std::string& body) {
    Write("HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  void NoContent() { Write("HTTP/1.1 204 No Content\r\n\r\n"); }
  void StartChunked(const std::string& content_type) {
    Write("HTTP/1.1 200 OK\r\nContent-Type: " + content_type + "\r\nTransfer-Encoding: chunked\r\n\r\n");
  }
  void Chunk(const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    Write(size + data + "\r\n");
  }
  void EndChunked() { Write("0\r\n\r\n"); }
  // The client's process id (SO_PEERCRED), for unix sockets.
  pid_t PeerPid() {
    ucred credentials{};
    socklen_t length = sizeof(credentials);
    getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &credentials, &length);
    return credentials.pid;
  }

 private:
  void Write(const std::string& bytes) {
    boost::system::error_code ec;
    boost::asio::write(socket_, boost::asio::buffer(bytes), ec);
  }
  boost::asio::generic::stream_protocol::socket& socket_;
};

class TestServer {
 public:
  using Handler = std::function<void(const RecordedRequest&, Reply&)>;

  // Listens on a fresh unix socket in a temporary directory.
  explicit TestServer(Handler handler) : handler_(std::move(handler)) {
    char dir_template[] = "/tmp/bulkhead-cli-test-XXXXXX";
    dir_ = mkdtemp(dir_template);
    socket_path_ = dir_ + "/bulkhead.sock";
    boost::asio::local::stream_protocol::endpoint endpoint(socket_path_);
    Listen(boost::asio::generic::stream_protocol::endpoint(endpoint));
  }

  // Listens on 127.0.0.1 at a free port.
  struct Tcp {};
  TestServer(Tcp, Handler handler) : handler_(std::move(handler)) {
    boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), 0);
    Listen(boost::asio::generic::stream_protocol::endpoint(endpoint));
    sockaddr_in address{};
    socklen_t length = sizeof(address);
    getsockname(acceptor_.native_handle(), reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }

  ~TestServer() {
    stopping_ = true;
    // Wake the blocking accept with one last connection.
    boost::system::error_code ec;
    boost::asio::generic::stream_protocol::socket waker(io_);
    waker.connect(acceptor_.local_endpoint(ec), ec);
    accept_thread_.join();
    waker.close(ec);
    for (auto& thread : connection_threads_) thread.join();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string url() const {
    return port_ != 0 ? "http://127.0.0.1:" + std::to_string(port_) : "unix://" + socket_path_;
  }
  const std::string& dir() const { return dir_; }

  // From now on the handler answers as soon as the request's header is in, and the
  // connection is closed without reading the body: a daemon refusing an upload early.
  void AnswerBeforeBody() { answer_before_body_ = true; }

  std::vector<RecordedRequest> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void Listen(const boost::asio::generic::stream_protocol::endpoint& endpoint) {
    acceptor_.open(endpoint.protocol());
    acceptor_.bind(endpoint);
    acceptor_.listen();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  void AcceptLoop() {
    for (;;) {
      boost::asio::generic::stream_protocol::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_ || ec) return;
      std::lock_guard lock(mutex_);
      connection_threads_.emplace_back([this, s = std::move(socket)]() mutable { Serve(s); });
    }
  }

  void Serve(boost::asio::generic::stream_protocol::socket& socket) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.body_limit(1u << 30);
    boost::system::error_code ec;
    if (answer_before_body_) {
      http::read_header(socket, buffer, parser, ec);
    } else {
      http::read(socket, buffer, parser, ec);
    }
    if (ec) return;
    const auto& message = parser.get();
    RecordedRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.content_type = std::string(message[http::field::content_type]);
    request.authorization = std::string(message[http::field::authorization]);
    request.accept = std::string(message[http::field::accept]);
    request.host = std::string(message[http::field::host]);
    request.chunked = message.chunked();
    if (!answer_before_body_) request.body = message.body();
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
    }
    Reply reply(socket);
    handler_(request, reply);
    socket.shutdown(boost::asio::socket_base::shutdown_both, ec);
  }

  Handler handler_;
  std::string dir_;
  std::string socket_path_;
  uint16_t port_ = 0;
  boost::asio::io_context io_;
  boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol> acceptor_{io_};
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> answer_before_body_{false};
  std::mutex mutex_;
  std::vector<std::thread> connection_threads_;
  std::vector<RecordedRequest> requests_;
};

}  // namespace bulkhead::cli::testing
