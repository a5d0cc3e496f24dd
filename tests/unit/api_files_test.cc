// The file routes' streaming end to end over loopback: a real ApiServer and the real
// FileOperation, in front of a fake manager (tests/support) whose sandbox's "file worker" is
// scripted here and speaks the control protocol on a socket pair. What a real worker cannot
// be made to do on cue (fail half-way through a download, announce the wrong size, fill the
// disk mid-upload) is scripted; the real worker is covered by tests/integration/test_files.py.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "common/ctl_protocol.h"
#include "daemon/server.h"
#include "support/fake_manager.h"
#include "support/temp_state_dir.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using nlohmann::json;
using testing::ExitFrame;
using testing::FakeManager;
using testing::Frame;
using testing::LocalSocket;
using testing::ReceivedFrame;
using testing::Receive;
using testing::Send;

constexpr const char* kKey = "test-key-0123456789";
constexpr size_t kMiB = 1024 * 1024;

std::string Exit(int code) { return ExitFrame({{"exit_code", code}, {"signal", nullptr}, {"timed_out", false}}); }

std::string WorkerError(const char* code) {
  return Frame(ctl::kStderr, json{{"code", code}, {"message", std::string(code) + " (scripted)"}}.dump() + "\n") + Exit(1);
}

// What the scripted worker saw, for the test thread.
struct WorkerLog {
  std::mutex mutex;
  std::condition_variable changed;
  json request;               // the kExec payload
  uint64_t stdin_bytes = 0;
  bool stdin_closed = false;  // kStdinClose arrived
  bool hung_up = false;       // the daemon closed the connection
  bool done = false;

  template <typename F>
  void Update(F f) {
    std::lock_guard lock(mutex);
    f();
    changed.notify_all();
  }
  bool WaitDone() {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(20), [&] { return done; });
  }
};

// Takes stdin until kStdinClose (true), a hang-up (false) or `stop_after` bytes (true).
asio::awaitable<bool> TakeStdin(LocalSocket& socket, WorkerLog& log, uint64_t stop_after) {
  for (;;) {
    const ReceivedFrame frame = co_await Receive(socket);
    const uint8_t type = frame.type;
    const std::string& payload = frame.payload;
    if (type == 0) {
      log.Update([&] { log.hung_up = true; });
      co_return false;
    }
    if (type == ctl::kStdinClose) {
      log.Update([&] { log.stdin_closed = true; });
      co_return true;
    }
    if (type == ctl::kStdin) log.Update([&] { log.stdin_bytes += payload.size(); });
    if (log.stdin_bytes >= stop_after) co_return true;
  }
}

std::string Pattern(size_t size) {
  std::string data(size, '\0');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 7 + i / 251) & 0xff);
  return data;
}

// What the scripted worker answers once it took its input, by path (a literal inside a
// co_await expression trips g++ 12, so the frames are built here).
std::string Answer(const std::string& path, uint64_t stdin_bytes) {
  if (path == "/up/ok") return Frame(ctl::kStdout, json{{"path", path}, {"size", stdin_bytes}}.dump() + "\n") + Exit(0);
  if (path == "/up/full") return WorkerError("disk_full");  // the disk fills after 1 MiB
  if (path == "/missing") return WorkerError("not_found");
  if (path == "/archive/fail") return Frame(ctl::kStdout, std::string(10000, 'T')) + WorkerError("internal");
  if (path.starts_with("/down/")) {
    // ok: all of it; fail: half, then an error; shrink: half, then success; grow: more than announced.
    const size_t size = 3 * kMiB + 123;
    const std::string data = Pattern(path == "/down/grow" ? size + 10 : size);
    const size_t send = path == "/down/fail" || path == "/down/shrink" ? size / 2 : data.size();
    std::string out = Frame(ctl::kStdout, json{{"size", size}}.dump() + "\n" + data.substr(0, 1000));
    for (size_t at = 1000; at < send; at += 64 * 1024) {
      out += Frame(ctl::kStdout, data.substr(at, std::min<size_t>(64 * 1024, send - at)));
    }
    return out + (path == "/down/fail" ? WorkerError("internal") : Exit(0));
  }
  if (path == "/watch") {
    // The ready line and an event split across frames, then silence until the daemon hangs up.
    return Frame(ctl::kStdout, "{\"type\":\"ready\"}\n{\"type\":\"create\",") +
           Frame(ctl::kStdout, "\"path\":\"/watch/a\",\"dir\":false}\n");
  }
  return {};  // vanish without an answer
}

// The worker side of one file operation; what it does depends on the path.
asio::awaitable<void> ScriptedWorker(LocalSocket socket, std::shared_ptr<WorkerLog> log) {
  const ReceivedFrame exec = co_await Receive(socket);
  const json request = json::parse(exec.payload);
  log->Update([&] { log->request = request; });
  const std::string path = request["file_op"]["path"];
  const std::string started = Frame(ctl::kStarted, R"({"pid": 9})");
  co_await Send(socket, started);

  if (path == "/up/ok" || path == "/up/full") {
    const uint64_t stop_after = path == "/up/full" ? kMiB : UINT64_MAX;
    const bool complete = co_await TakeStdin(socket, *log, stop_after);
    if (complete) {
      const std::string answer = Answer(path, log->stdin_bytes);
      co_await Send(socket, answer);
    }
  } else if (path == "/watch") {
    asio::steady_timer timer(socket.get_executor(), std::chrono::milliseconds(200));
    co_await timer.async_wait(asio::use_awaitable);
    const std::string answer = Answer(path, 0);
    co_await Send(socket, answer);
    const ReceivedFrame next = co_await Receive(socket);
    if (next.type == 0) log->Update([&] { log->hung_up = true; });
  } else {
    const std::string answer = Answer(path, 0);
    co_await Send(socket, answer);
  }
  log->Update([&] { log->done = true; });
}

class ApiFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    core::SandboxSpec spec;
    spec.workdir = "/home/dev";
    spec.user = "dev";
    manager_.AddSandbox("sb", spec);
    manager_.connect_init = [log = log_](LocalSocket socket, std::string) {
      return ScriptedWorker(std::move(socket), log);
    };
    ServerOptions options;
    options.api_key = kKey;
    options.upload_dir = dir_;
    options.shutdown_grace = std::chrono::milliseconds(2000);
    server_ = std::make_unique<ApiServer>(manager_, options);
    auto endpoint = server_->ListenTcp("127.0.0.1:0");
    ASSERT_TRUE(endpoint.ok()) << endpoint.error().message;
    port_ = endpoint->port();
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    server_->Stop();
    thread_.join();
  }

  tcp::socket Connect() {
    tcp::socket socket(io_);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
    return socket;
  }

  static http::request<http::string_body> Request(http::verb method, const std::string& target, std::string body = "") {
    http::request<http::string_body> request{method, target, 11};
    request.set(http::field::host, "localhost");
    request.set(http::field::authorization, std::string("Bearer ") + kKey);
    request.body() = std::move(body);
    request.prepare_payload();
    return request;
  }

  // Sends `request` and reads the response: its header always, its body as far as it goes.
  struct Reply {
    int status = 0;
    http::fields headers;
    std::string body;
    bool complete = false;  // the body arrived whole (not cut short)
    bool keep_alive = false;
  };
  Reply Call(const http::request<http::string_body>& request) {
    tcp::socket socket = Connect();
    http::write(socket, request);
    return ReadReply(socket);
  }
  // Shuts a socket down if a read on it takes too long, so a response that never ends fails
  // the test instead of hanging it.
  class ReadDeadline {
   public:
    explicit ReadDeadline(int fd)
        : thread_([this, fd] {
            std::unique_lock lock(mutex_);
            if (!changed_.wait_for(lock, std::chrono::seconds(20), [this] { return disarmed_; })) {
              fired_ = true;
              ::shutdown(fd, SHUT_RDWR);
            }
          }) {}
    ~ReadDeadline() {
      {
        std::lock_guard lock(mutex_);
        disarmed_ = true;
      }
      changed_.notify_all();
      thread_.join();
    }

    bool fired() {
      std::lock_guard lock(mutex_);
      return fired_;
    }

   private:
    std::mutex mutex_;
    std::condition_variable changed_;
    bool disarmed_ = false;
    bool fired_ = false;
    std::thread thread_;
  };

  static Reply ReadReply(tcp::socket& socket) {
    ReadDeadline deadline(socket.native_handle());
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * kMiB);
    boost::system::error_code ec;
    http::read_header(socket, buffer, parser, ec);
    Reply reply;
    if (ec) return reply;
    http::read(socket, buffer, parser, ec);
    reply.status = parser.get().result_int();
    reply.headers = parser.get().base();
    reply.body = parser.get().body();
    reply.complete = !ec && parser.is_done();
    reply.keep_alive = parser.get().keep_alive();
    EXPECT_FALSE(deadline.fired()) << "the response neither ended nor was cut off";
    return reply;
  }

  testing::TempStateDir temp_{"bulkhead-api-files-test"};
  const std::string dir_ = temp_.path();
  FakeManager manager_;
  std::shared_ptr<WorkerLog> log_ = std::make_shared<WorkerLog>();  // the worker script's
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
  uint16_t port_ = 0;
  asio::io_context io_;
};

TEST_F(ApiFilesTest, RequestCarriesTheOpUserAndAbsolutePaths) {
  Reply reply = Call(Request(http::verb::put, "/v1/sandboxes/sb/files?path=/up/ok&mode=0640&append=true", "abc"));
  ASSERT_EQ(reply.status, 201) << reply.body;
  ASSERT_TRUE(log_->WaitDone());
  const json& request = log_->request;
  EXPECT_EQ(request["file_op"], json::parse(R"({"op": "write", "path": "/up/ok", "mode": 416, "parents": true, "append": true})"));
  EXPECT_EQ(request["user"], "dev");  // the sandbox's user by default
  EXPECT_EQ(request["stdin"], true);
  EXPECT_FALSE(request.contains("argv"));
  EXPECT_EQ(json::parse(reply.body)["size"], 3);
}

TEST_F(ApiFilesTest, ChunkedUploadStreamsEveryByteAndClosesStdinAtTheEnd) {
  tcp::socket socket = Connect();
  const std::string head = std::string("PUT /v1/sandboxes/sb/files?path=/up/ok&user=1000 HTTP/1.1\r\nHost: x\r\n") +
                           "Authorization: Bearer " + kKey + "\r\nTransfer-Encoding: chunked\r\n\r\n";
  asio::write(socket, asio::buffer(head));
  uint64_t sent = 0;
  for (size_t size : {size_t{1}, 300 * 1024ul, kMiB, 17ul}) {
    char chunk_head[32];
    std::snprintf(chunk_head, sizeof chunk_head, "%zx\r\n", size);
    asio::write(socket, asio::buffer(std::string(chunk_head) + std::string(size, 'c') + "\r\n"));
    sent += size;
  }
  asio::write(socket, asio::buffer(std::string("0\r\n\r\n")));
  Reply reply = ReadReply(socket);
  ASSERT_EQ(reply.status, 201) << reply.body;
  EXPECT_EQ(json::parse(reply.body)["size"], sent);
  EXPECT_TRUE(reply.keep_alive);
  ASSERT_TRUE(log_->WaitDone());
  EXPECT_TRUE(log_->stdin_closed);
  EXPECT_EQ(log_->request["user"], "1000");
}

TEST_F(ApiFilesTest, DiskFullMidUploadIsAnsweredAtOnceAndTheConnectionCloses) {
  tcp::socket socket = Connect();
  const uint64_t announced = uint64_t{1} << 30;
  const std::string head = std::string("PUT /v1/sandboxes/sb/files?path=/up/full HTTP/1.1\r\nHost: x\r\n") +
                           "Authorization: Bearer " + kKey + "\r\nContent-Length: " + std::to_string(announced) + "\r\n\r\n";
  asio::write(socket, asio::buffer(head));
  // The body goes out from another thread: the daemon stops reading it, so this write stalls.
  std::atomic<uint64_t> written{0};
  std::thread writer([&] {
    const std::string block(256 * 1024, 'b');
    boost::system::error_code ec;
    while (written < announced && !ec) written += asio::write(socket, asio::buffer(block), ec);
  });
  Reply reply = ReadReply(socket);
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  writer.join();
  EXPECT_EQ(reply.status, 507) << reply.body;
  EXPECT_EQ(json::parse(reply.body)["error"]["code"], "disk_full");
  EXPECT_FALSE(reply.keep_alive);  // the rest of the body was never read
  EXPECT_LT(written.load(), announced);
  ASSERT_TRUE(log_->WaitDone());
  EXPECT_FALSE(log_->stdin_closed);
}

TEST_F(ApiFilesTest, UploadCutOffNeverClosesTheWorkersStdin) {
  {
    tcp::socket socket = Connect();
    const std::string head = std::string("PUT /v1/sandboxes/sb/files?path=/up/ok HTTP/1.1\r\nHost: x\r\n") +
                             "Authorization: Bearer " + kKey + "\r\nContent-Length: 10000000\r\n\r\n";
    asio::write(socket, asio::buffer(head + std::string(600 * 1024, 'p')));
  }  // closed half-way
  ASSERT_TRUE(log_->WaitDone());
  EXPECT_TRUE(log_->hung_up);
  EXPECT_FALSE(log_->stdin_closed);  // a partial body is never passed off as complete
}

TEST_F(ApiFilesTest, DownloadHasTheAnnouncedLengthAndKeepsTheConnection) {
  Reply reply = Call(Request(http::verb::get, "/v1/sandboxes/sb/files?path=/down/ok"));
  ASSERT_EQ(reply.status, 200);
  EXPECT_TRUE(reply.complete);
  EXPECT_TRUE(reply.keep_alive);
  EXPECT_EQ(reply.headers[http::field::content_type], "application/octet-stream");
  EXPECT_EQ(reply.headers[http::field::content_length], std::to_string(3 * kMiB + 123));
  EXPECT_EQ(reply.body, Pattern(3 * kMiB + 123));
}

TEST_F(ApiFilesTest, DownloadThatFailsHalfWayIsCutShort) {
  for (const char* path : {"/down/fail", "/down/shrink", "/down/grow"}) {
    Reply reply = Call(Request(http::verb::get, std::string("/v1/sandboxes/sb/files?path=") + path));
    EXPECT_EQ(reply.status, 200) << path;
    EXPECT_FALSE(reply.complete) << path;  // the connection closed before Content-Length bytes
    EXPECT_LE(reply.body.size(), 3 * kMiB + 123) << path;
    EXPECT_EQ(reply.body, Pattern(3 * kMiB + 123).substr(0, reply.body.size())) << path;
  }
}

TEST_F(ApiFilesTest, WorkerFailureBeforeAnyOutputIsAnOrdinaryError) {
  for (const char* route : {"", "/stat", "/archive", "/watch"}) {
    Reply reply = Call(Request(http::verb::get, std::string("/v1/sandboxes/sb/files") + route + "?path=/missing"));
    EXPECT_EQ(reply.status, 404) << route;
    EXPECT_EQ(json::parse(reply.body)["error"]["code"], "not_found") << route;
    EXPECT_TRUE(reply.keep_alive) << route;
  }
  Reply unknown = Call(Request(http::verb::get, "/v1/sandboxes/other/files?path=/x"));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body)["error"]["code"], "sandbox_not_found");
}

TEST_F(ApiFilesTest, ArchiveThatFailsHalfWayHasNoLastChunk) {
  Reply reply = Call(Request(http::verb::get, "/v1/sandboxes/sb/files/archive?path=/archive/fail"));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers[http::field::content_type], "application/x-tar");
  EXPECT_FALSE(reply.complete);
  EXPECT_EQ(reply.body, std::string(10000, 'T'));
}

TEST_F(ApiFilesTest, WatchAnswersOnceReadyPassesWholeLinesAndEndsTheWorkerOnHangUp) {
  tcp::socket socket = Connect();
  http::write(socket, Request(http::verb::get, "/v1/sandboxes/sb/files/watch?path=/watch"));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  http::read_header(socket, buffer, parser);
  EXPECT_EQ(parser.get().result_int(), 200);
  EXPECT_EQ(parser.get()[http::field::content_type], "application/x-ndjson");
  // The event arrives as one line although the worker split it across two frames.
  while (parser.get().body().find('\n') == std::string::npos) http::read_some(socket, buffer, parser);
  EXPECT_EQ(json::parse(parser.get().body()), json::parse(R"({"type":"create","path":"/watch/a","dir":false})"));
  socket.close();
  ASSERT_TRUE(log_->WaitDone());
  EXPECT_TRUE(log_->hung_up);
  EXPECT_EQ(log_->request["file_op"]["recursive"], true);
}

TEST_F(ApiFilesTest, RelativePathsUseTheSandboxWorkdir) {
  Reply reply = Call(Request(http::verb::get, "/v1/sandboxes/sb/files/stat?path=notes.txt"));
  // (This worker ends without answering: a worker that vanishes is a 500.)
  EXPECT_EQ(reply.status, 500);
  ASSERT_TRUE(log_->WaitDone());
  EXPECT_EQ(log_->request["file_op"]["path"], "/home/dev/notes.txt");
  EXPECT_EQ(log_->request["stdin"], false);
}

}  // namespace
}  // namespace bulkhead::api
