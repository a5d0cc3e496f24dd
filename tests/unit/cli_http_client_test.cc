#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "cli_test_server.h"
#include "client/api_client.h"
#include "client/http_client.h"

namespace bulkhead::cli {
namespace {

using testing::RecordedRequest;
using testing::Reply;
using testing::TestServer;

HttpClient ClientFor(const TestServer& server, const std::string& key = "k") {
  auto address = ParseServerUrl(server.url());
  EXPECT_TRUE(address.ok());
  return HttpClient(*address, key);
}

// Lets the test thread and a server thread wait for each other, with a deadline so a
// broken client fails the test instead of hanging it.
class Signal {
 public:
  void Notify() {
    std::lock_guard lock(mutex_);
    done_ = true;
    condition_.notify_all();
  }
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return condition_.wait_for(lock, timeout, [this] { return done_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable condition_;
  bool done_ = false;
};

TEST(CliHttpClient, SendsJsonWithTheKeyAndReadsTheAnswer) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(201, R"({"id":"sb-1"})"); });
  auto response = ClientFor(server, "secret").Send(HttpMethod::kPost, "/v1/sandboxes", R"({"image":"host"})");
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->content_type, "application/json");
  EXPECT_EQ(response->body, R"({"id":"sb-1"})");
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].target, "/v1/sandboxes");
  EXPECT_EQ(requests[0].authorization, "Bearer secret");
  EXPECT_EQ(requests[0].content_type, "application/json");
  EXPECT_EQ(requests[0].host, "localhost");
  EXPECT_EQ(requests[0].body, R"({"image":"host"})");
}

TEST(CliHttpClient, SendsNoAuthorizationWithoutAKey) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.NoContent(); });
  auto response = ClientFor(server, "").Send(HttpMethod::kDelete, "/v1/sandboxes/x");
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 204);
  EXPECT_EQ(server.requests()[0].authorization, "");
  EXPECT_EQ(server.requests()[0].method, "DELETE");
}

TEST(CliHttpClient, WorksOverLoopbackTcp) {
  TestServer server(TestServer::Tcp{}, [](const RecordedRequest&, Reply& reply) {
    reply.Json(200, R"({"status":"ok","version":"0.1.0"})");
  });
  auto response = ClientFor(server).Send(HttpMethod::kGet, "/healthz");
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(server.requests()[0].host.rfind("127.0.0.1:", 0), 0u);
}

TEST(CliHttpClient, HandsNdjsonLinesOverAsTheyArrive) {
  Signal first_line_seen;
  bool client_saw_line_before_second_was_sent = false;
  TestServer server([&](const RecordedRequest&, Reply& reply) {
    reply.StartChunked("application/x-ndjson");
    reply.Chunk("{\"type\":\"start\",\"pid\":1}\n{\"type\":\"stdout\",");  // a line split across chunks
    reply.Chunk("\"data\":\"a\\n\"}\n");
    // A client that buffers the body never sees line 2 before the stream ends.
    client_saw_line_before_second_was_sent = first_line_seen.WaitFor(std::chrono::seconds(10));
    reply.Chunk("{\"type\":\"stdout\",\"data\":\"b\\n\"}\n{\"type\":\"exit\",\"exit_code\":0}");
    reply.EndChunked();
  });
  std::vector<std::string> lines;
  auto response = ClientFor(server).SendForLines(HttpMethod::kPost, "/v1/sandboxes/x/exec", R"({"cmd":["x"]})",
                                                 [&](std::string_view line) -> Status {
                                                   lines.emplace_back(line);
                                                   if (lines.size() == 2) first_line_seen.Notify();
                                                   return {};
                                                 });
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_TRUE(client_saw_line_before_second_was_sent);
  EXPECT_EQ(response->body, "");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1], R"({"type":"stdout","data":"a\n"})");
  EXPECT_EQ(lines[3], R"({"type":"exit","exit_code":0})");  // no final newline
  EXPECT_EQ(server.requests()[0].accept, "application/x-ndjson");
}

TEST(CliHttpClient, AnErrorAnswerToAStreamingRequestComesBackWhole) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(404, R"({"error":{"code":"sandbox_not_found","message":"no sandbox x"}})");
  });
  int lines = 0;
  auto response = ClientFor(server).SendForLines(HttpMethod::kPost, "/v1/sandboxes/x/exec", "{}",
                                                 [&](std::string_view) -> Status {
                                                   ++lines;
                                                   return {};
                                                 });
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(lines, 0);
  Error error = ErrorFromResponse(*response);
  EXPECT_EQ(error.code, ErrorCode::kNotFound);
  EXPECT_EQ(error.detail_code, "sandbox_not_found");
  EXPECT_EQ(error.message, "no sandbox x");
}

TEST(CliHttpClient, ErrorsWithoutTheApiShapeStillSayWhatHappened) {
  Error error = ErrorFromResponse(HttpResponse{500, "text/plain", "it broke\n"});
  EXPECT_EQ(error.code, ErrorCode::kInternal);
  EXPECT_EQ(error.message, "the daemon answered HTTP 500: it broke");
  EXPECT_EQ(error.detail_code, "internal");
  EXPECT_EQ(ErrorFromResponse(HttpResponse{502, "text/plain", "bad gateway\n"}).code, ErrorCode::kBadGateway);
  Error html = ErrorFromResponse(HttpResponse{501, "text/html", "<!DOCTYPE HTML>\n<html>...</html>"});
  EXPECT_EQ(html.message, "the daemon answered HTTP 501");
  Error too_many = ErrorFromResponse(HttpResponse{429, "", ""});
  EXPECT_EQ(too_many.detail_code, "too_many_requests");
}

TEST(CliHttpClient, StreamsAChunkedRequestBody) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    reply.Json(201, R"({"name":"img","size_bytes":)" + std::to_string(request.body.size()) + "}");
  });
  std::string expected;
  auto response = ClientFor(server).SendStreamingBody(
      HttpMethod::kPut, "/v1/images/img", "application/x-tar", std::nullopt, [&](const BodyChunkSink& sink) -> Status {
        for (int i = 0; i < 64; ++i) {
          std::string piece(32 << 10, static_cast<char>('a' + i % 26));
          expected += piece;
          BH_TRY(sink(piece));
          BH_TRY(sink(""));  // empty pieces must not end the body
        }
        return Status{};
      });
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 201);
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].chunked);
  EXPECT_EQ(requests[0].content_type, "application/x-tar");
  EXPECT_EQ(requests[0].body.size(), expected.size());
  EXPECT_TRUE(requests[0].body == expected);
}

TEST(CliHttpClient, StreamsABodyOfKnownLengthWithoutChunking) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(201, "{}"); });
  auto response = ClientFor(server).SendStreamingBody(HttpMethod::kPut, "/v1/images/f", "application/x-tar",
                                                      uint64_t{10}, [](const BodyChunkSink& sink) -> Status {
                                                        BH_TRY(sink("01234"));
                                                        return sink("56789");
                                                      });
  ASSERT_TRUE(response.ok()) << response.error().message;
  auto requests = server.requests();
  EXPECT_FALSE(requests[0].chunked);
  EXPECT_EQ(requests[0].body, "0123456789");
}

TEST(CliHttpClient, AProducerErrorAbortsTheUploadWithThatError) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(201, "{}"); });
  auto response = ClientFor(server).SendStreamingBody(
      HttpMethod::kPut, "/v1/images/f", "application/x-tar", std::nullopt, [](const BodyChunkSink& sink) -> Status {
        BH_TRY(sink("partial"));
        return Status(MakeError(ErrorCode::kInternal, "disk read failed", "tar_failed"));
      });
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().detail_code, "tar_failed");
  // The server saw a truncated chunked body, never a complete request.
  EXPECT_TRUE(server.requests().empty());
}

TEST(CliHttpClient, ADaemonRefusingABodyEarlyIsHeardOverTheBrokenPipe) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(413, R"({"error":{"code":"payload_too_large","message":"request body exceeds 1048576 bytes"}})");
  });
  server.AnswerBeforeBody();
  std::string big_json = "{\"stdin\":\"" + std::string(32 << 20, 'x') + "\"}";
  auto buffered = ClientFor(server).Send(HttpMethod::kPost, "/v1/sandboxes/x/exec", big_json);
  ASSERT_TRUE(buffered.ok()) << buffered.error().message;
  EXPECT_EQ(buffered->status, 413);
  EXPECT_EQ(ErrorFromResponse(*buffered).detail_code, "payload_too_large");

  auto streamed = ClientFor(server).SendStreamingBody(
      HttpMethod::kPut, "/v1/images/big", "application/x-tar", std::nullopt, [](const BodyChunkSink& sink) -> Status {
        std::string piece(1 << 20, 'y');
        for (int i = 0; i < 64; ++i) BH_TRY(sink(piece));
        return {};
      });
  ASSERT_TRUE(streamed.ok()) << streamed.error().message;
  EXPECT_EQ(streamed->status, 413);
}

TEST(CliHttpClient, NoDaemonMeansAClearMessageWithHowToStartIt) {
  HttpClient client(DefaultServerAddress("/nonexistent-bulkhead-state"), "");
  auto response = client.Send(HttpMethod::kGet, "/healthz");
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().detail_code, "daemon_not_running");
  EXPECT_NE(response.error().message.find("bulkhead serve --state-dir /nonexistent-bulkhead-state"),
            std::string::npos)
      << response.error().message;

  auto tcp = ParseServerUrl("http://127.0.0.1:1");
  ASSERT_TRUE(tcp.ok());
  auto refused = HttpClient(*tcp, "").Send(HttpMethod::kGet, "/healthz");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().detail_code, "daemon_not_running");
  EXPECT_NE(refused.error().message.find("--listen 127.0.0.1:1"), std::string::npos) << refused.error().message;
}

TEST(CliHttpClient, ADaemonThatHangsUpMidAnswerIsAnError) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.StartChunked("application/x-ndjson");
    reply.Chunk("{\"type\":\"start\",\"pid\":1}\n");
    // closes without the terminating chunk
  });
  auto response = ClientFor(server).SendForLines(HttpMethod::kPost, "/v1/sandboxes/x/exec", "{}",
                                                 [](std::string_view) -> Status { return {}; });
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().detail_code, "connection_lost");
}

}  // namespace
}  // namespace bulkhead::cli
