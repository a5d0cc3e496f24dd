// The HTTP layer end to end over loopback: a real ApiServer, real sockets and the real
// ExecSession, in front of a fake SandboxManager (tests/support; the core is tested on its
// own) whose "init" speaks the control protocol on a socket pair.
#include "daemon/server.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "common/ctl_protocol.h"
#include "http/encoding.h"
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
using testing::Send;

constexpr const char* kKey = "test-key-0123456789";

// ---- A scripted init: plays the sandbox side of one exec connection.

struct InitLog {
  std::mutex mutex;
  std::condition_variable changed;
  bool started = false;    // the "sleep" command began
  bool cancelled = false;  // the daemon closed the connection before the end
  void Set(bool InitLog::*flag) {
    std::lock_guard lock(mutex);
    this->*flag = true;
    changed.notify_all();
  }
  bool WaitFor(bool InitLog::*flag, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return this->*flag; });
  }
};

asio::awaitable<void> ScriptedExec(LocalSocket socket, core::ExecRequest request, std::shared_ptr<InitLog> log) {
  const std::string command = request.argv.at(0) == "/bin/sh" ? "sh" : request.argv.at(0);
  const std::string started = Frame(ctl::kStarted, R"({"pid": 7})");
  const json ok_exit = {{"exit_code", 0}, {"signal", nullptr}, {"timed_out", false}, {"duration_ms", 1.25}};
  if (command == "echo" || command == "sh") {
    const std::string text = command == "sh" ? request.argv[2] : request.argv.at(1);
    co_await Send(socket, started + Frame(ctl::kStdout, text) + Frame(ctl::kStderr, "note\n") + ExitFrame(ok_exit));
  } else if (command == "cat") {
    co_await Send(socket, started + Frame(ctl::kStdout, request.stdin_data.value_or("")) + ExitFrame(ok_exit));
  } else if (command == "binary") {
    const json exit = {{"exit_code", 3}, {"signal", nullptr}, {"timed_out", false}, {"duration_ms", 2}};
    co_await Send(socket, started + Frame(ctl::kStdout, std::string("\xff\x00\x01", 3)) +
                              Frame(ctl::kStderr, "err") + ExitFrame(exit));
  } else if (command == "split-utf8") {
    co_await Send(socket, started + Frame(ctl::kStdout, "a\xE2\x82") + Frame(ctl::kStdout, "\xAC!") + ExitFrame(ok_exit));
  } else if (command == "flood") {
    std::string frames = started;
    for (int i = 0; i < 64; ++i) frames += Frame(ctl::kStdout, std::string(16 * 1024, 'x'));
    co_await Send(socket, frames + ExitFrame(ok_exit));
  } else if (command == "killed") {
    const json exit = {{"exit_code", nullptr}, {"signal", 9}, {"timed_out", true}, {"duration_ms", 1000}};
    co_await Send(socket, started + ExitFrame(exit));
  } else if (command == "forged-pid") {  // what a hijacked init could send
    co_await Send(socket, Frame(ctl::kStarted, R"({"pid": "7"})") + ExitFrame(ok_exit));
  } else if (command == "forged-exit") {
    const std::string exit = Frame(ctl::kExit, R"({"exit_code": 300, "signal": "9", "timed_out": "yes"})");
    co_await Send(socket, started + exit);
  } else if (command == "forged-error") {
    co_await Send(socket, Frame(ctl::kError, R"({"code": 5, "message": ["not", "text"]})"));
  } else if (command == "no-cwd") {
    co_await Send(socket, Frame(ctl::kError, R"({"code": "not_found", "message": "cwd /nope does not exist"})"));
  } else if (command == "lose") {
    co_await Send(socket, started + Frame(ctl::kStdout, "partial"));
    socket.close();
  } else if (command == "slow") {  // ends after 300 ms
    co_await Send(socket, started);
    asio::steady_timer timer(socket.get_executor(), std::chrono::milliseconds(300));
    co_await timer.async_wait(asio::use_awaitable);
    co_await Send(socket, ExitFrame(ok_exit));
  } else if (command == "sleep") {  // runs until the daemon hangs up
    co_await Send(socket, started);
    log->Set(&InitLog::started);
    char byte;
    boost::system::error_code ec;
    co_await asio::async_read(socket, asio::buffer(&byte, 1), asio::redirect_error(asio::use_awaitable, ec));
    log->Set(&InitLog::cancelled);
  }
}

// ---- The fixture: a server on 127.0.0.1:<ephemeral> and a unix socket.

using Response = http::response<http::string_body>;

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ServerOptions{}); }

  void Start(ServerOptions options) {
    manager_.exec_init = [this](LocalSocket socket, core::ExecRequest request) {
      return ScriptedExec(std::move(socket), std::move(request), init_log_);
    };
    options.api_key = kKey;
    options.upload_dir = dir_ + "/tmp";
    options.shutdown_grace = std::chrono::milliseconds(2000);
    std::filesystem::create_directory(options.upload_dir);
    server_ = std::make_unique<ApiServer>(manager_, options);
    auto endpoint = server_->ListenTcp("127.0.0.1:0");
    ASSERT_TRUE(endpoint.ok()) << endpoint.error().message;
    port_ = endpoint->port();
    socket_path_ = dir_ + "/bulkhead.sock";
    ASSERT_TRUE(server_->ListenUnix(socket_path_).ok());
    thread_ = std::thread([this] { server_->Run(); });
  }

  void TearDown() override {
    if (server_) {
      server_->Stop();
      thread_.join();
      server_.reset();
    }
  }

  tcp::socket Connect() {
    tcp::socket socket(io_);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
    return socket;
  }

  static http::request<http::string_body> MakeRequest(http::verb method, const std::string& target,
                                                      std::string body = "", bool with_key = true) {
    http::request<http::string_body> request{method, target, 11};
    request.set(http::field::host, "localhost");
    if (with_key) request.set(http::field::authorization, std::string("Bearer ") + kKey);
    if (!body.empty()) request.set(http::field::content_type, "application/json");
    request.body() = std::move(body);
    request.prepare_payload();
    return request;
  }

  template <typename Stream>
  static Response Exchange(Stream& socket, const http::request<http::string_body>& request) {
    http::write(socket, request);
    beast::flat_buffer buffer;
    Response response;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 * 1024 * 1024);
    http::read(socket, buffer, parser);
    return parser.release();
  }

  Response Call(http::verb method, const std::string& target, std::string body = "", bool with_key = true) {
    tcp::socket socket = Connect();
    return Exchange(socket, MakeRequest(method, target, std::move(body), with_key));
  }

  Response Call(http::request<http::string_body> request) {
    tcp::socket socket = Connect();
    return Exchange(socket, request);
  }

  static json Body(const Response& response) { return json::parse(response.body()); }
  static std::string ErrorCode(const Response& response) {
    return json::parse(response.body())["error"]["code"].get<std::string>();
  }

  std::string CreateSandbox(json spec = json::object()) {
    Response response = Call(http::verb::post, "/v1/sandboxes", spec.dump());
    EXPECT_EQ(response.result_int(), 201) << response.body();
    return Body(response)["id"].get<std::string>();
  }

  static std::vector<json> NdjsonLines(const std::string& body) {
    std::vector<json> lines;
    size_t start = 0;
    while (start < body.size()) {
      const size_t end = body.find('\n', start);
      EXPECT_NE(end, std::string::npos) << "every line ends with a newline";
      lines.push_back(json::parse(body.substr(start, end - start)));
      start = end + 1;
    }
    return lines;
  }

  testing::TempStateDir temp_{"bulkhead-api-server-test"};
  const std::string dir_ = temp_.path();
  FakeManager manager_;
  std::shared_ptr<InitLog> init_log_ = std::make_shared<InitLog>();  // the exec script's
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
  std::string socket_path_;
  uint16_t port_ = 0;
  asio::io_context io_;
};

TEST_F(ApiServerTest, HealthzAnswersWithoutKey) {
  Response response = Call(http::verb::get, "/healthz", "", /*with_key=*/false);
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_EQ(response[http::field::content_type], "application/json");
  EXPECT_EQ(Body(response), json({{"status", "ok"},
                                  {"version", BULKHEAD_VERSION},
                                  {"listen", {"127.0.0.1:" + std::to_string(port_)}},
                                  {"preview_domain", "localhost:7420"},
                                  {"runtimes",
                                   {{"gvisor", {{"available", false}, {"reason", "no runsc here"}}},
                                    {"native", {{"available", true}, {"memory_snapshots", false}}}}}}));
}

TEST_F(ApiServerTest, EveryOtherRouteNeedsTheKey) {
  for (auto [method, target] : std::vector<std::pair<http::verb, std::string>>{
           {http::verb::get, "/metrics"}, {http::verb::get, "/openapi.json"}, {http::verb::get, "/v1/sandboxes"},
           {http::verb::post, "/v1/sandboxes"}, {http::verb::get, "/v1/nonexistent"}}) {
    Response response = Call(method, target, "", /*with_key=*/false);
    EXPECT_EQ(response.result_int(), 401) << target;
    EXPECT_EQ(ErrorCode(response), "unauthorized") << target;
    EXPECT_EQ(response[http::field::www_authenticate], "Bearer");
  }
  auto wrong = MakeRequest(http::verb::get, "/v1/sandboxes", "", false);
  wrong.set(http::field::authorization, "Bearer test-key-0123456788");
  EXPECT_EQ(Call(wrong).result_int(), 401);
  EXPECT_TRUE(manager_.List({}).empty());
}

TEST_F(ApiServerTest, UnknownRouteIs404AndWrongMethodIs405WithAllow) {
  Response missing = Call(http::verb::get, "/v1/nothing");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_EQ(ErrorCode(missing), "not_found");
  Response wrong = Call(http::verb::patch, "/v1/sandboxes/x");
  EXPECT_EQ(wrong.result_int(), 405);
  EXPECT_EQ(ErrorCode(wrong), "method_not_allowed");
  EXPECT_EQ(wrong[http::field::allow], "GET, DELETE");
}

TEST_F(ApiServerTest, AnswersToHeadHaveNoContent) {
  // HEAD, then GET on the same connection: a client reads no content after the HEAD's
  // answer, so any sent would be taken for the start of the next response.
  tcp::socket socket = Connect();
  asio::write(socket, asio::buffer(std::string("HEAD /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
                                               "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> head;
  head.skip(true);
  http::read(socket, buffer, head);
  EXPECT_EQ(head.get().result_int(), 401);  // only GET /healthz goes without the key
  EXPECT_NE(head.get()[http::field::content_length], "0");  // the length a GET would get
  http::response_parser<http::string_body> get;
  boost::system::error_code ec;
  http::read(socket, buffer, get, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(get.get().result_int(), 200);
  EXPECT_EQ(json::parse(get.get().body())["status"], "ok");
}

TEST_F(ApiServerTest, CreateGetListTimeoutDeleteSandbox) {
  Response created = Call(http::verb::post, "/v1/sandboxes",
                          json({{"cpus", 0.5}, {"metadata", {{"owner", "ci"}}}, {"env", {{"A", "1"}}}}).dump());
  ASSERT_EQ(created.result_int(), 201) << created.body();
  const json sandbox = Body(created);
  const std::string id = sandbox["id"];
  EXPECT_EQ(sandbox["state"], "running");
  EXPECT_EQ(sandbox["cpus"], 0.5);
  EXPECT_EQ(sandbox["memory_mb"], 1024);  // default filled in
  EXPECT_EQ(sandbox["metadata"], json({{"owner", "ci"}}));
  EXPECT_FALSE(sandbox.contains("usage"));
  EXPECT_EQ(manager_.last_spec.env.at("A"), "1");

  Response got = Call(http::verb::get, "/v1/sandboxes/" + id);
  ASSERT_EQ(got.result_int(), 200);
  EXPECT_EQ(Body(got)["usage"]["memory_bytes"], 1 << 20);

  CreateSandbox({{"metadata", {{"owner", "someone else"}}}});
  Response all = Call(http::verb::get, "/v1/sandboxes");
  EXPECT_EQ(Body(all)["sandboxes"].size(), 2u);
  Response filtered = Call(http::verb::get, "/v1/sandboxes?state=running&metadata.owner=ci");
  ASSERT_EQ(Body(filtered)["sandboxes"].size(), 1u);
  EXPECT_EQ(Body(filtered)["sandboxes"][0]["id"], id);
  Response spaced = Call(http::verb::get, "/v1/sandboxes?metadata.owner=someone+else");
  EXPECT_EQ(Body(spaced)["sandboxes"].size(), 1u);
  EXPECT_EQ(Call(http::verb::get, "/v1/sandboxes?state=bogus").result_int(), 422);

  Response timeout = Call(http::verb::post, "/v1/sandboxes/" + id + "/timeout", R"({"timeout_s": 900})");
  ASSERT_EQ(timeout.result_int(), 200) << timeout.body();
  EXPECT_EQ(Body(timeout)["timeout_s"], 900);
  EXPECT_EQ(Body(timeout)["expires_at"], "2024-05-01T11:00:00Z");
  EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/" + id + "/timeout", R"({"timeout_s": -1})").result_int(), 422);

  Response deleted = Call(http::verb::delete_, "/v1/sandboxes/" + id);
  EXPECT_EQ(deleted.result_int(), 204);
  EXPECT_TRUE(deleted.body().empty());
  Response gone = Call(http::verb::get, "/v1/sandboxes/" + id);
  EXPECT_EQ(gone.result_int(), 404);
  EXPECT_EQ(ErrorCode(gone), "sandbox_not_found");
}

TEST_F(ApiServerTest, BadRequestsGetTheRightStatus) {
  Response malformed = Call(http::verb::post, "/v1/sandboxes", "{not json");
  EXPECT_EQ(malformed.result_int(), 400);
  EXPECT_EQ(ErrorCode(malformed), "bad_request");
  Response invalid = Call(http::verb::post, "/v1/sandboxes", R"({"memory_mb": "lots"})");
  EXPECT_EQ(invalid.result_int(), 422);
  EXPECT_EQ(ErrorCode(invalid), "invalid_argument");
  EXPECT_NE(Body(invalid)["error"]["message"].get<std::string>().find("memory_mb"), std::string::npos);
  Response core_error = Call(http::verb::post, "/v1/sandboxes", R"({"image": "missing"})");
  EXPECT_EQ(core_error.result_int(), 404);
  EXPECT_EQ(ErrorCode(core_error), "image_not_found");
  Response bad_id = Call(http::verb::get, "/v1/sandboxes/..%2Fetc");
  EXPECT_EQ(bad_id.result_int(), 404);
  EXPECT_EQ(ErrorCode(bad_id), "sandbox_not_found");
}

TEST_F(ApiServerTest, OversizedJsonBodyIs413) {
  Response big = Call(http::verb::post, "/v1/sandboxes", "{\"x\":\"" + std::string(2 << 20, 'a') + "\"}");
  EXPECT_EQ(big.result_int(), 413);
  EXPECT_EQ(ErrorCode(big), "payload_too_large");
  // Chunked, so the size is only known while reading.
  auto request = MakeRequest(http::verb::post, "/v1/sandboxes", "{\"x\":\"" + std::string(2 << 20, 'a') + "\"}");
  request.chunked(true);
  EXPECT_EQ(Call(request).result_int(), 413);
  EXPECT_TRUE(manager_.List({}).empty());
}

TEST_F(ApiServerTest, ExceptionInTheCoreIs500AndTheServerGoesOn) {
  Response response = Call(http::verb::get, "/v1/sandboxes/throws");
  EXPECT_EQ(response.result_int(), 500);
  EXPECT_EQ(ErrorCode(response), "internal");
  EXPECT_EQ(Call(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(ApiServerTest, ExecAnswersTheResult) {
  const std::string id = CreateSandbox();
  Response response = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["echo", "hi\n"]})");
  ASSERT_EQ(response.result_int(), 200) << response.body();
  EXPECT_EQ(Body(response), json({{"exit_code", 0}, {"signal", nullptr}, {"stdout", "hi\n"}, {"stderr", "note\n"},
                                  {"duration_ms", 1.25}, {"timed_out", false}, {"truncated", false}}));
  // A string command runs under the shell.
  Response shell = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": "echo $HOME"})");
  EXPECT_EQ(Body(shell)["stdout"], "echo $HOME");
  EXPECT_EQ(manager_.last_exec.argv, (std::vector<std::string>{"/bin/sh", "-c", "echo $HOME"}));
}

TEST_F(ApiServerTest, ExecPassesStdinAndReportsBinaryOutputAsBase64) {
  const std::string id = CreateSandbox();
  const std::string bytes("\x00\x01\xfe", 3);
  Response cat = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec",
                      json({{"cmd", {"cat"}}, {"stdin_b64", Base64Encode(bytes)}}).dump());
  ASSERT_EQ(cat.result_int(), 200);
  EXPECT_EQ(Base64Decode(Body(cat)["stdout_b64"].get<std::string>()), bytes);
  Response binary = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["binary"]})");
  const json result = Body(binary);
  EXPECT_EQ(result["exit_code"], 3);
  EXPECT_EQ(result["stdout"], std::string("\xEF\xBF\xBD\x00\x01", 5));
  EXPECT_EQ(Base64Decode(result["stdout_b64"].get<std::string>()), std::string("\xff\x00\x01", 3));
  EXPECT_EQ(result["stderr"], "err");
  EXPECT_FALSE(result.contains("stderr_b64"));
}

TEST_F(ApiServerTest, ExecReportsSignalsByNameAndCapsOutput) {
  const std::string id = CreateSandbox();
  Response killed = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["killed"]})");
  EXPECT_TRUE(Body(killed)["exit_code"].is_null());
  EXPECT_EQ(Body(killed)["signal"], "SIGKILL");
  EXPECT_EQ(Body(killed)["timed_out"], true);

  Response capped = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec",
                         R"({"cmd": ["flood"], "max_output_bytes": 100000})");
  ASSERT_EQ(capped.result_int(), 200);
  EXPECT_EQ(Body(capped)["stdout"].get<std::string>().size(), 100000u);
  EXPECT_EQ(Body(capped)["truncated"], true);
  EXPECT_EQ(Body(capped)["exit_code"], 0);  // the command still ran to its end
}

TEST_F(ApiServerTest, ExecErrorsBeforeTheStartAreOrdinaryErrors) {
  EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/nope/exec", R"({"cmd": ["echo", "x"]})").result_int(), 404);
  const std::string id = CreateSandbox();
  auto request = MakeRequest(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["no-cwd"]})");
  request.set(http::field::accept, "application/x-ndjson");
  Response response = Call(request);
  EXPECT_EQ(response.result_int(), 404);
  EXPECT_EQ(ErrorCode(response), "not_found");
  EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": []})").result_int(), 422);
}

TEST_F(ApiServerTest, ExecStreamsNdjson) {
  const std::string id = CreateSandbox();
  auto request = MakeRequest(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["split-utf8"]})");
  request.set(http::field::accept, "application/x-ndjson");
  Response response = Call(request);
  ASSERT_EQ(response.result_int(), 200);
  EXPECT_EQ(response[http::field::content_type], "application/x-ndjson");
  EXPECT_TRUE(response.chunked());
  const std::vector<json> lines = NdjsonLines(response.body());
  ASSERT_EQ(lines.size(), 4u) << response.body();
  EXPECT_EQ(lines[0], json({{"type", "start"}, {"pid", 7}}));
  // The euro sign split across two reads arrives whole, as text.
  EXPECT_EQ(lines[1], json({{"type", "stdout"}, {"data", "a"}}));
  EXPECT_EQ(lines[2], json({{"type", "stdout"}, {"data", "\xE2\x82\xAC!"}}));
  EXPECT_EQ(lines[3], json({{"type", "exit"}, {"exit_code", 0}, {"signal", nullptr}, {"duration_ms", 1.25},
                            {"timed_out", false}, {"truncated", false}}));
}

TEST_F(ApiServerTest, ExecStreamEndsWithAnErrorLineWhenInitIsLost) {
  const std::string id = CreateSandbox();
  auto request = MakeRequest(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["lose"]})");
  request.set(http::field::accept, "application/x-ndjson");
  Response response = Call(request);
  ASSERT_EQ(response.result_int(), 200);
  const std::vector<json> lines = NdjsonLines(response.body());
  ASSERT_EQ(lines.size(), 3u) << response.body();
  EXPECT_EQ(lines[1]["data"], "partial");
  EXPECT_EQ(lines[2]["type"], "error");
  EXPECT_EQ(lines[2]["code"], "sandbox_unreachable");
}

TEST_F(ApiServerTest, ClientHangupCancelsTheCommand) {
  const std::string id = CreateSandbox();
  for (bool stream : {false, true}) {
    init_log_ = std::make_shared<InitLog>();
    auto log = init_log_;
    tcp::socket socket = Connect();
    auto request = MakeRequest(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["sleep"]})");
    if (stream) request.set(http::field::accept, "application/x-ndjson");
    http::write(socket, request);
    ASSERT_TRUE(log->WaitFor(&InitLog::started, std::chrono::seconds(5)));
    socket.close();
    EXPECT_TRUE(log->WaitFor(&InitLog::cancelled, std::chrono::seconds(5))) << "stream=" << stream;
  }
}

TEST_F(ApiServerTest, KeepAliveAndPipelinedRequestsOnOneConnection) {
  tcp::socket socket = Connect();
  // Two requests in one write: the second is already buffered when the first is answered.
  std::string both;
  for (int i = 0; i < 2; ++i) {
    both += "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  both += "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kKey) +
          "\r\nContent-Length: 2\r\n\r\n{}";
  asio::write(socket, asio::buffer(both));
  beast::flat_buffer buffer;
  for (int expected : {200, 200, 201}) {
    Response response;
    http::read(socket, buffer, response);
    EXPECT_EQ(response.result_int(), expected);
    EXPECT_TRUE(response.keep_alive());
  }
  // And the connection still serves.
  EXPECT_EQ(Exchange(socket, MakeRequest(http::verb::get, "/v1/sandboxes")).result_int(), 200);
}

TEST_F(ApiServerTest, OversizedHeadersAre431AndMalformedRequests400) {
  auto request = MakeRequest(http::verb::get, "/healthz");
  request.set("X-Padding", std::string(20 * 1024, 'a'));
  Response response = Call(request);
  EXPECT_EQ(response.result_int(), 431);
  EXPECT_EQ(ErrorCode(response), "headers_too_large");

  tcp::socket socket = Connect();
  asio::write(socket, asio::buffer(std::string("NOT HTTP AT ALL\r\n\r\n")));
  beast::flat_buffer buffer;
  Response bad;
  http::read(socket, buffer, bad);
  EXPECT_EQ(bad.result_int(), 400);
}

TEST_F(ApiServerTest, ImageUploadIsSpooledToDiskAndImported) {
  std::string tarball(3 << 20, '\0');
  for (size_t i = 0; i < tarball.size(); ++i) tarball[i] = static_cast<char>(i * 7);
  auto request = MakeRequest(http::verb::put, "/v1/images/my-image", tarball);
  request.set(http::field::content_type, "application/x-tar");
  request.set(http::field::expect, "100-continue");
  tcp::socket socket = Connect();
  http::write(socket, request);
  beast::flat_buffer buffer;
  Response response;
  http::read(socket, buffer, response);
  if (response.result_int() == 100) http::read(socket, buffer, response = {});
  ASSERT_EQ(response.result_int(), 201) << response.body();
  EXPECT_EQ(Body(response)["name"], "my-image");
  EXPECT_EQ(Body(response)["size_bytes"], tarball.size());
  EXPECT_EQ(manager_.imported["my-image"], tarball);
  EXPECT_TRUE(manager_.imported_from.starts_with(dir_ + "/tmp/upload-"));
  EXPECT_FALSE(std::filesystem::exists(manager_.imported_from)) << "the spool file is removed";

  auto chunked = MakeRequest(http::verb::put, "/v1/images/chunked", tarball);
  chunked.chunked(true);
  EXPECT_EQ(Call(chunked).result_int(), 201);
  EXPECT_EQ(manager_.imported["chunked"], tarball);

  EXPECT_EQ(Call(http::verb::put, "/v1/images/Bad_Name", "x").result_int(), 422);
  EXPECT_EQ(Call(http::verb::put, "/v1/images/empty", "").result_int(), 422);
  // A body announced over 16 GiB is refused before a byte of it is read.
  auto huge = MakeRequest(http::verb::put, "/v1/images/huge");
  huge.set(http::field::content_length, std::to_string((uint64_t{16} << 30) + 1));
  tcp::socket huge_socket = Connect();
  http::write(huge_socket, huge);
  Response too_large;
  http::read(huge_socket, buffer = {}, too_large);
  EXPECT_EQ(too_large.result_int(), 413);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/tmp"));
}

TEST_F(ApiServerTest, ImagesListAndDelete) {
  manager_.AddImage("old");
  manager_.AddImage("busy");
  core::SandboxSpec on_busy;
  on_busy.image = "busy";
  manager_.AddSandbox("sb-on-busy", on_busy);
  Response list = Call(http::verb::get, "/v1/images");
  EXPECT_EQ(Body(list)["images"][0]["name"], "host");
  EXPECT_EQ(Call(http::verb::delete_, "/v1/images/old").result_int(), 204);
  EXPECT_EQ(Call(http::verb::delete_, "/v1/images/busy").result_int(), 409);
  EXPECT_EQ(Call(http::verb::delete_, "/v1/images/absent").result_int(), 404);
  EXPECT_EQ(Call(http::verb::delete_, "/v1/images/NOT..valid").result_int(), 404);
}

TEST_F(ApiServerTest, SnapshotRoutesValidateAndAnswerInTheContractShapes) {
  manager_.AddSandbox("sb1");
  manager_.AddSnapshot({.id = "snap_1", .sandbox_id = "sb1", .image = "host"});
  manager_.AddSnapshot({.id = "snap_busy", .sandbox_id = "sb1", .image = "host"});
  core::SandboxSpec from_busy;
  from_busy.from_snapshot = "snap_busy";
  manager_.AddSandbox("sb-from-busy", from_busy);
  Response created = Call(http::verb::post, "/v1/sandboxes/sb1/snapshots", R"({"name": "before-upgrade"})");
  ASSERT_EQ(created.result_int(), 201);
  EXPECT_EQ(Body(created)["name"], "before-upgrade");
  EXPECT_EQ(Body(created)["memory"], false);
  EXPECT_EQ(Body(created)["sandbox_id"], "sb1");
  EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/sb1/snapshots", R"({"name": ")" + std::string(129, 'n') + R"("})")
                .result_int(),
            422);
  EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/nope/snapshots").result_int(), 404);
  Response list = Call(http::verb::get, "/v1/snapshots");
  EXPECT_EQ(Body(list)["snapshots"][0]["id"], "snap_1");
  EXPECT_TRUE(Body(list)["snapshots"][0]["name"].is_null());
  EXPECT_EQ(Call(http::verb::get, "/v1/snapshots/snap_1").result_int(), 200);
  EXPECT_EQ(ErrorCode(Call(http::verb::get, "/v1/snapshots/other")), "snapshot_not_found");
  EXPECT_EQ(Call(http::verb::delete_, "/v1/snapshots/snap_1").result_int(), 204);
  EXPECT_EQ(ErrorCode(Call(http::verb::delete_, "/v1/snapshots/snap_busy")), "snapshot_in_use");
  EXPECT_EQ(Call(http::verb::delete_, "/v1/snapshots/..").result_int(), 404);

  Response forks = Call(http::verb::post, "/v1/sandboxes/sb1/fork", R"({"count": 3})");
  ASSERT_EQ(forks.result_int(), 201);
  EXPECT_EQ(Body(forks)["sandboxes"].size(), 3u);
  EXPECT_EQ(Body(Call(http::verb::post, "/v1/sandboxes/sb1/fork"))["sandboxes"].size(), 1u);
  for (const char* bad : {R"({"count": 0})", R"({"count": 17})", R"({"count": "x"})", R"({"count": 1.5})"}) {
    EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/sb1/fork", bad).result_int(), 422) << bad;
  }
}

TEST_F(ApiServerTest, LifecycleRoutesAnswerTheSandbox) {
  const std::string id = CreateSandbox();
  for (auto [action, state] : std::vector<std::pair<std::string, std::string>>{
           {"pause", "paused"}, {"resume", "running"}, {"stop", "stopped"}, {"start", "running"}}) {
    Response r = Call(http::verb::post, "/v1/sandboxes/" + id + "/" + action);
    EXPECT_EQ(r.result_int(), 200) << action;
    EXPECT_EQ(Body(r)["state"], state) << action;
    EXPECT_EQ(Call(http::verb::post, "/v1/sandboxes/nope/" + action).result_int(), 404) << action;
  }
}

TEST_F(ApiServerTest, MetricsAndOpenApiAreServed) {
  Call(http::verb::get, "/healthz", "", false);
  Call(http::verb::get, "/v1/sandboxes/nope");
  // A request is counted once its response is out, so the client may be a step ahead.
  const std::string healthz_line = "bulkhead_http_requests_total{method=\"GET\",route=\"/healthz\",code=\"200\"} 1";
  Response metrics;
  for (int attempt = 0; attempt < 50; ++attempt) {
    metrics = Call(http::verb::get, "/metrics");
    if (metrics.body().find(healthz_line) != std::string::npos &&
        metrics.body().find("code=\"404\"} 1") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(metrics.result_int(), 200);
  EXPECT_EQ(metrics[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = metrics.body();
  EXPECT_NE(text.find(healthz_line), std::string::npos) << text;
  EXPECT_NE(text.find("route=\"/v1/sandboxes/{id}\",code=\"404\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("bulkhead_http_connections_open "), std::string::npos);
  EXPECT_EQ(text.find("bulkhead_http_connections_open 0\n"), std::string::npos) << "this very connection is open";
  EXPECT_NE(text.find("process_resident_memory_bytes "), std::string::npos);

  Response openapi = Call(http::verb::get, "/openapi.json");
  ASSERT_EQ(openapi.result_int(), 200);
  EXPECT_EQ(Body(openapi)["openapi"], "3.1.0");
}

TEST_F(ApiServerTest, UnixSocketServesTheSameApiWithMode0600) {
  struct stat st {};
  ASSERT_EQ(stat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  asio::local::stream_protocol::socket socket(io_);
  socket.connect(asio::local::stream_protocol::endpoint(socket_path_));
  EXPECT_EQ(Exchange(socket, MakeRequest(http::verb::get, "/v1/sandboxes")).result_int(), 200);
  EXPECT_EQ(Exchange(socket, MakeRequest(http::verb::get, "/v1/sandboxes", "", false)).result_int(), 401);
}

TEST_F(ApiServerTest, ASecondServerRefusesALiveSocketButReplacesAStaleOne) {
  ApiServer second(manager_, ServerOptions{.api_key = kKey});
  EXPECT_FALSE(second.ListenUnix(socket_path_).ok());
  const std::string stale = dir_ + "/stale.sock";
  {
    ApiServer first(manager_, ServerOptions{.api_key = kKey});
    ASSERT_TRUE(first.ListenUnix(stale).ok());
  }  // the listener is closed, the file stays
  ASSERT_TRUE(std::filesystem::exists(stale));
  EXPECT_TRUE(second.ListenUnix(stale).ok());
}

TEST_F(ApiServerTest, ShutdownLetsRequestsInFlightFinish) {
  const std::string id = CreateSandbox();
  tcp::socket socket = Connect();
  http::write(socket, MakeRequest(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["slow"]})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server_->Stop();
  beast::flat_buffer buffer;
  Response response;
  http::read(socket, buffer, response);
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_FALSE(response.keep_alive());
  thread_.join();
  server_.reset();
  // Nothing listens any more.
  tcp::socket late(io_);
  boost::system::error_code ec;
  late.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
  EXPECT_TRUE(ec);
}

class ApiServerConnectionLimitTest : public ApiServerTest {
 protected:
  void SetUp() override { Start(ServerOptions{.max_connections = 2}); }
};

TEST_F(ApiServerConnectionLimitTest, ConnectionsBeyondTheCapGet503) {
  tcp::socket first = Connect();
  tcp::socket second = Connect();
  // Make sure both are accepted and served before the third arrives.
  EXPECT_EQ(Exchange(first, MakeRequest(http::verb::get, "/healthz")).result_int(), 200);
  EXPECT_EQ(Exchange(second, MakeRequest(http::verb::get, "/healthz")).result_int(), 200);
  tcp::socket third = Connect();
  beast::flat_buffer buffer;
  Response response;
  http::read(third, buffer, response);
  EXPECT_EQ(response.result_int(), 503);
  EXPECT_EQ(ErrorCode(response), "unavailable");
  first.close();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Call(http::verb::get, "/healthz").result_int(), 200);
}

// Sandbox code that took over init could send anything: the daemon parses it as untrusted.
TEST_F(ApiServerTest, ForgedExecFramesAreProtocolErrorsNotCrashes) {
  const std::string id = CreateSandbox();
  Response pid = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["forged-pid"]})");
  EXPECT_EQ(pid.result_int(), 500);
  EXPECT_EQ(ErrorCode(pid), "sandbox_protocol_error") << pid.body();

  // Fields of the wrong type or out of range are dropped, not trusted.
  Response exit = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["forged-exit"]})");
  ASSERT_EQ(exit.result_int(), 200) << exit.body();
  EXPECT_TRUE(Body(exit)["exit_code"].is_null());
  EXPECT_TRUE(Body(exit)["signal"].is_null());
  EXPECT_EQ(Body(exit)["timed_out"], false);

  Response error = Call(http::verb::post, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["forged-error"]})");
  EXPECT_EQ(error.result_int(), 500);
  EXPECT_EQ(Body(error)["error"]["message"], "the sandbox's init failed") << error.body();
}

TEST_F(ApiServerTest, ForgedProcessTablesAreProtocolErrorsNotCrashes) {
  auto result = [](const std::string& payload) { return Frame(ctl::kResult, payload); };
  const json process = {{"pid", 7}, {"tag", "web"}, {"cmd", {"sleep", "9"}}, {"state", "running"},
                        {"exit_code", nullptr}, {"signal", nullptr}, {"started_at", "2026-01-01T00:00:00.000Z"},
                        {"exited_at", nullptr}, {"pty", {{"cols", 80}, {"rows", 24}}}, {"stdout_offset", 3},
                        {"stderr_offset", 0}, {"stdout_start", 0}, {"stderr_start", 0}};
  json injected = process;
  injected["injected"] = "by the sandbox";
  injected["pty"]["extra"] = true;
  json wrong_type = process;
  wrong_type["pid"] = "7";
  // Copying or printing JSON nested this deep overflows the stack (nlohmann recurses).
  const std::string deep = R"({"processes": [)" + std::string(500000, '[') + std::string(500000, ']') + "]}";
  const std::map<std::string, std::string> answers = {{"deep", result(deep)},
                                                      {"typed", result(json{{"processes", {wrong_type}}}.dump())},
                                                      {"injected", result(json{{"processes", {injected}}}.dump())}};
  for (const auto& [id, answer] : answers) manager_.AddSandbox(id);
  manager_.connect_init = [answers](LocalSocket socket, std::string id) {
    return testing::AnswerFirstFrame(std::move(socket), answers.at(id));
  };

  for (const char* id : {"deep", "typed"}) {
    Response list = Call(http::verb::get, std::string("/v1/sandboxes/") + id + "/processes");
    EXPECT_EQ(list.result_int(), 500) << id;
    EXPECT_EQ(ErrorCode(list), "sandbox_protocol_error") << id << ": " << list.body();
  }
  // Only the fields of a Process reach the client.
  Response list = Call(http::verb::get, "/v1/sandboxes/injected/processes");
  ASSERT_EQ(list.result_int(), 200) << list.body();
  EXPECT_EQ(Body(list), json({{"processes", {process}}}));
  EXPECT_EQ(Call(http::verb::get, "/healthz", "", false).result_int(), 200);
}

}  // namespace
}  // namespace bulkhead::api
