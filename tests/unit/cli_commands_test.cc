// The client commands end to end against a throwaway HTTP server that answers like the
// daemon's API (API.md): real parsing, real HTTP, real output on file descriptors.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli_run.h"
#include "cli_test_server.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;
using testing::RecordedRequest;
using testing::Reply;
using testing::TestServer;
using testing::CliResult;
using testing::Find;
using testing::ReadBack;
using testing::RunCli;


// Answers create with sandbox "sb-1", exec with the given NDJSON lines, delete with 204.
TestServer::Handler FakeSandboxApi(std::vector<std::string> exec_lines) {
  return [exec_lines](const RecordedRequest& request, Reply& reply) {
    if (request.method == "POST" && request.target == "/v1/sandboxes") {
      reply.Json(201, R"({"id":"sb-1","state":"running","image":"host"})");
    } else if (request.method == "POST" && request.target == "/v1/sandboxes/sb-1/exec") {
      reply.StartChunked("application/x-ndjson");
      for (const auto& line : exec_lines) reply.Chunk(line + "\n");
      reply.EndChunked();
    } else if (request.method == "DELETE" && request.target == "/v1/sandboxes/sb-1") {
      reply.NoContent();
    } else {
      reply.Json(404, R"({"error":{"code":"not_found","message":"no route"}})");
    }
  };
}

TEST(CliCommands, RunCreatesStreamsRemovesAndExitsWithTheCommandsCode) {
  TestServer server(FakeSandboxApi({
      R"({"type":"start","pid":7})",
      R"({"type":"stdout","data":"a\n"})",
      R"({"type":"stderr","data":"warn\n"})",
      R"({"type":"stdout","data":"b\n"})",
      R"({"type":"exit","exit_code":3,"signal":null,"duration_ms":2.0,"timed_out":false})",
  }));
  CliResult result = RunCli(server, {"run", "--image", "py", "--memory-mb", "256", "--timeout", "10", "-e", "A=1",
                                     "--workdir", "/w", "--", "echo hello", "x y"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_EQ(result.out, "a\nb\n");
  EXPECT_EQ(result.err, "warn\n");

  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  const RecordedRequest* create = Find(requests, "POST", "/v1/sandboxes");
  ASSERT_NE(create, nullptr);
  json sandbox = json::parse(create->body);
  EXPECT_EQ(sandbox["image"], "py");
  EXPECT_EQ(sandbox["memory_mb"], 256);
  EXPECT_EQ(sandbox["env"], json({{"A", "1"}}));
  EXPECT_EQ(sandbox["workdir"], "/w");
  EXPECT_GE(sandbox["timeout_s"].get<int>(), 10);  // outlives the command's own timeout
  const RecordedRequest* exec = Find(requests, "POST", "/v1/sandboxes/sb-1/exec");
  ASSERT_NE(exec, nullptr);
  json exec_body = json::parse(exec->body);
  EXPECT_EQ(exec_body["cmd"], json({"echo hello", "x y"}));  // argv, never a shell string
  EXPECT_EQ(exec_body["timeout_s"], 10);
  EXPECT_FALSE(exec_body.contains("stdin_b64"));
  EXPECT_EQ(exec->accept, "application/x-ndjson");
  EXPECT_NE(Find(requests, "DELETE", "/v1/sandboxes/sb-1"), nullptr);
}

TEST(CliCommands, RunSendsStdinWhenAsked) {
  TestServer server(FakeSandboxApi({R"({"type":"exit","exit_code":0,"signal":null,"timed_out":false})"}));
  std::string input("line1\n\xff\x00", 8);
  CliResult result = RunCli(server, {"run", "-i", "--", "cat"}, input);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  json exec_body = json::parse(Find(server.requests(), "POST", "/v1/sandboxes/sb-1/exec")->body);
  EXPECT_EQ(exec_body["stdin_b64"], "bGluZTEK/wA=");
}

TEST(CliCommands, RunReportsSignalsAndTimeoutsLikeAShell) {
  TestServer killed(FakeSandboxApi({R"({"type":"exit","exit_code":null,"signal":"SIGKILL","timed_out":false})"}));
  EXPECT_EQ(RunCli(killed, {"run", "--", "sleep", "9"}).exit_code, 137);
  TestServer timed_out(FakeSandboxApi({R"({"type":"exit","exit_code":null,"signal":"SIGKILL","timed_out":true})"}));
  EXPECT_EQ(RunCli(timed_out, {"run", "--timeout", "1", "--", "sleep", "9"}).exit_code, 124);
}

TEST(CliCommands, RunRemovesTheSandboxEvenWhenTheCommandFails) {
  TestServer server(FakeSandboxApi({R"({"type":"error","error":{"code":"no_such_cwd","message":"no /w"}})"}));
  CliResult result = RunCli(server, {"run", "--", "true"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, "bulkhead: no /w (no_such_cwd)\n");
  EXPECT_NE(Find(server.requests(), "DELETE", "/v1/sandboxes/sb-1"), nullptr);
}

TEST(CliCommands, RunRemovesTheSandboxWhenTheStreamBreaks) {
  TestServer server(FakeSandboxApi({R"({"type":"start","pid":1})"}));  // ends without an exit event
  CliResult result = RunCli(server, {"run", "--", "true"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("(stream_ended)"), std::string::npos) << result.err;
  EXPECT_NE(Find(server.requests(), "DELETE", "/v1/sandboxes/sb-1"), nullptr);
}

TEST(CliCommands, ApiErrorsArePrintedWithTheirCode) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(422, R"({"error":{"code":"invalid_argument","message":"memory_mb must be at least 16"}})");
  });
  CliResult result = RunCli(server, {"run", "--memory-mb", "1", "--", "true"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, "bulkhead: memory_mb must be at least 16 (invalid_argument)\n");
  EXPECT_EQ(server.requests().size(), 1u);  // nothing created, nothing to remove
}

TEST(CliCommands, UnauthorizedNamesWhereTheKeyCameFrom) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.authorization == "Bearer right") {
      reply.Json(200, R"({"sandboxes":[]})");
    } else {
      reply.Json(401, R"({"error":{"code":"unauthorized","message":"bad API key"}})");
    }
  });
  std::ofstream(server.dir() + "/api-key") << "wrong\n";
  CliResult result = RunCli(server, {"ls"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find(server.dir() + "/api-key"), std::string::npos) << result.err;
  std::ofstream(server.dir() + "/api-key") << "right\n";
  EXPECT_EQ(RunCli(server, {"ls"}).exit_code, 0);
}

TEST(CliCommands, ExecStreamsIntoAnExistingSandbox) {
  TestServer server(FakeSandboxApi({R"({"type":"stdout","data_b64":"/w=="})",
                                    R"({"type":"exit","exit_code":0,"signal":null,"timed_out":false})"}));
  CliResult result = RunCli(server, {"exec", "sb-1", "-e", "K=V", "--cwd", "/tmp", "--timeout", "5", "--", "ls"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "\xff");
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);  // exec never creates or removes
  json body = json::parse(requests[0].body);
  EXPECT_EQ(body["cmd"], json({"ls"}));
  EXPECT_EQ(body["env"], json({{"K", "V"}}));
  EXPECT_EQ(body["cwd"], "/tmp");
  EXPECT_EQ(body["timeout_s"], 5);
}

TEST(CliCommands, ExecAcceptsANonStreamingAnswer) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(200, R"({"exit_code":2,"signal":null,"stdout":"out","stderr":"err","timed_out":false})");
  });
  CliResult result = RunCli(server, {"exec", "sb-1", "--", "x"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.out, "out");
  EXPECT_EQ(result.err, "err");
}

TEST(CliCommands, IdsAreEscapedInPaths) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(404, R"({"error":{"code":"sandbox_not_found","message":"no such sandbox"}})");
  });
  CliResult result = RunCli(server, {"inspect", "../../etc"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(server.requests()[0].target, "/v1/sandboxes/..%2F..%2Fetc");
  EXPECT_EQ(result.err, "bulkhead: no such sandbox (sandbox_not_found)\n");
}

TEST(CliCommands, CreatePrintsTheIdOrTheWholeObject) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(201, R"({"id":"sb-9","state":"running","metadata":{"a":"b"}})");
  });
  CliResult plain = RunCli(server, {"create", "--metadata", "a=b", "--timeout", "60", "--cpus", "0.5"});
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_EQ(plain.out, "sb-9\n");
  json body = json::parse(server.requests()[0].body);
  EXPECT_EQ(body["metadata"], json({{"a", "b"}}));
  EXPECT_EQ(body["timeout_s"], 60);
  EXPECT_EQ(body["cpus"], 0.5);
  EXPECT_FALSE(body.contains("image"));  // unset flags are the daemon's to default
  EXPECT_FALSE(body.contains("preview"));

  CliResult as_json = RunCli(server, {"create", "--json", "--private-preview"});
  EXPECT_EQ(json::parse(as_json.out)["id"], "sb-9");
  EXPECT_EQ(json::parse(server.requests()[1].body)["preview"], json({{"public", false}}));

  CliResult bad = RunCli(server, {"create", "--metadata", "novalue"});
  EXPECT_EQ(bad.exit_code, 2);
}

TEST(CliCommands, ListShowsATableAndPassesFilters) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(200, R"({"sandboxes":[
      {"id":"sb-1","state":"running","image":"host","created_at":"2020-01-01T00:00:00Z","expires_at":null},
      {"id":"sb-22","state":"paused","image":"python","created_at":"2020-01-01T00:00:00Z",
       "expires_at":"2999-01-01T00:00:00Z"}]})");
  });
  CliResult result = RunCli(server, {"ls", "--state", "running", "--metadata", "team=a b"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(server.requests()[0].target, "/v1/sandboxes?state=running&metadata.team=a%20b");
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = result.out.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(result.out.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 3u) << result.out;
  EXPECT_EQ(lines[0].rfind("ID    ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("EXPIRES"), std::string::npos);
  EXPECT_EQ(lines[1].rfind("sb-1  ", 0), 0u);
  EXPECT_NE(lines[1].find("never"), std::string::npos);
  EXPECT_NE(lines[2].find(" in "), std::string::npos);
}

TEST(CliCommands, RemoveReportsEachIdAndFailsIfAnyFailed) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/gone") {
      reply.Json(404, R"({"error":{"code":"sandbox_not_found","message":"no sandbox gone"}})");
    } else {
      reply.NoContent();
    }
  });
  CliResult result = RunCli(server, {"rm", "a", "gone", "b"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "a\nb\n");
  EXPECT_EQ(result.err, "bulkhead: gone: no sandbox gone (sandbox_not_found)\n");
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(CliCommands, ImageImportStreamsADirectoryAsTar) {
  std::string received;
  TestServer server([&received](const RecordedRequest& request, Reply& reply) {
    received = request.body;
    reply.Json(201, R"({"name":"mini","source":"tarball","size_bytes":2048})");
  });
  std::filesystem::path root = server.dir() + "/rootfs";
  std::filesystem::create_directories(root / "bin");
  std::ofstream(root / "bin" / "tool") << "#!/bin/sh\necho hi\n";
  CliResult result = RunCli(server, {"image", "import", "mini", root.string()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "imported mini (2.0 KiB)\n");
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].target, "/v1/images/mini");
  EXPECT_EQ(requests[0].content_type, "application/x-tar");
  EXPECT_TRUE(requests[0].chunked);

  std::set<std::string> names;
  archive* reader = archive_read_new();
  archive_read_support_format_tar(reader);
  ASSERT_EQ(archive_read_open_memory(reader, received.data(), received.size()), ARCHIVE_OK);
  archive_entry* entry;
  while (archive_read_next_header(reader, &entry) == ARCHIVE_OK) names.insert(archive_entry_pathname(entry));
  archive_read_free(reader);
  EXPECT_EQ(names, (std::set<std::string>{"./", "./bin/", "./bin/tool"}));
}

TEST(CliCommands, ImageImportSendsAFileAsItIs) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(201, R"({"name":"z"})"); });
  std::string tarball = server.dir() + "/rootfs.tar.zst";
  std::string bytes(300000, '\x28');
  std::ofstream(tarball, std::ios::binary) << bytes;
  CliResult result = RunCli(server, {"image", "import", "z", tarball});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].chunked);
  EXPECT_TRUE(requests[0].body == bytes);
}

TEST(CliCommands, ImageListAndRemove) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.method == "GET") {
      reply.Json(200, R"({"images":[{"name":"host","source":"host","size_bytes":0,"created_at":""}]})");
    } else {
      reply.NoContent();
    }
  });
  CliResult listed = RunCli(server, {"image", "ls"});
  EXPECT_EQ(listed.exit_code, 0);
  EXPECT_EQ(listed.out.rfind("NAME", 0), 0u);
  EXPECT_NE(listed.out.find("host"), std::string::npos);
  CliResult removed = RunCli(server, {"image", "rm", "old"});
  EXPECT_EQ(removed.exit_code, 0);
  EXPECT_EQ(server.requests().back().target, "/v1/images/old");
  EXPECT_EQ(server.requests().back().method, "DELETE");
}

TEST(CliCommands, VersionShowsTheDaemonWhenReachable) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(200, R"({"status":"ok","version":"9.9.9"})");
  });
  CliResult result = RunCli(server, {"version"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("daemon: bulkhead 9.9.9"), std::string::npos) << result.out;
}

TEST(CliCommands, NoDaemonTellsHowToStartIt) {
  unsetenv("BULKHEAD_URL");
  CommandLine line;
  line.command = Command::kList;
  line.state_dir = "/nonexistent-bulkhead-state";
  UniqueFd out(memfd_create("out", MFD_CLOEXEC)), err(memfd_create("err", MFD_CLOEXEC));
  int exit_code = RunClientCommand(line, CommandIo{0, out.get(), err.get(), false});
  EXPECT_EQ(exit_code, 1);
  std::string message = ReadBack(err.get());
  EXPECT_NE(message.find("Is it running?"), std::string::npos) << message;
  EXPECT_NE(message.find("bulkhead serve"), std::string::npos) << message;
  EXPECT_NE(message.find("(daemon_not_running)"), std::string::npos) << message;
}

// SIGTERM while the command runs: the sandbox is removed and the CLI exits 143. Runs the
// CLI in a forked child; the server (in this process) sends the signal once the child's
// exec request has arrived, and keeps the stream open until the sandbox is deleted.
TEST(CliCommands, RunRemovesItsSandboxWhenInterrupted) {
#if defined(__SANITIZE_THREAD__)
  // It forks this multi-threaded process and runs the client, which starts threads, in the
  // child: ThreadSanitizer cannot follow that (its state breaks in the child).
  GTEST_SKIP() << "forks a multi-threaded process; not under ThreadSanitizer";
#endif
  std::mutex mutex;
  std::condition_variable deleted_condition;
  bool deleted = false;
  TestServer server([&](const RecordedRequest& request, Reply& reply) {
    if (request.method == "POST" && request.target == "/v1/sandboxes") {
      reply.Json(201, R"({"id":"sb-1"})");
    } else if (request.method == "POST") {
      reply.StartChunked("application/x-ndjson");
      reply.Chunk("{\"type\":\"stdout\",\"data\":\"started\\n\"}\n");
      kill(reply.PeerPid(), SIGTERM);
      std::unique_lock lock(mutex);
      deleted_condition.wait_for(lock, std::chrono::seconds(10), [&] { return deleted; });
    } else if (request.method == "DELETE") {
      reply.NoContent();
      std::lock_guard lock(mutex);
      deleted = true;
      deleted_condition.notify_all();
    }
  });
  std::string url = server.url();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CommandLine line;
    line.command = Command::kRun;
    line.url = url;
    line.state_dir = "/nonexistent";
    line.exec.argv = {"sleep", "100"};
    UniqueFd out(memfd_create("out", 0));
    _exit(RunClientCommand(line, CommandIo{0, out.get(), out.get(), /*handle_interrupts=*/true}));
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 143);
  std::lock_guard lock(mutex);
  EXPECT_TRUE(deleted);
}

}  // namespace
}  // namespace bulkhead::cli
