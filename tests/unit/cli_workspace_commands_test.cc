// cp, ls ID, watch, exec -d, ps, logs and kill end to end against a throwaway HTTP server
// that answers like the daemon's API: real parsing, real HTTP, real files on disk.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli_run.h"
#include "cli_test_server.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::RecordedRequest;
using testing::Reply;
using testing::TestServer;
using testing::CliResult;
using testing::Find;
using testing::RunCli;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}


la_ssize_t AppendToString(archive*, void* client_data, const void* buffer, size_t length) {
  static_cast<std::string*>(client_data)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

// A tar like the sandbox's archive_create: names relative to the directory.
std::string TarOf(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string tar;
  archive* writer = archive_write_new();
  archive_write_set_format_pax_restricted(writer);
  archive_write_open(writer, &tar, nullptr, AppendToString, nullptr);
  for (const auto& [name, data] : files) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
    archive_write_header(writer, entry);
    archive_write_data(writer, data.data(), data.size());
    archive_entry_free(entry);
  }
  archive_write_close(writer);
  archive_write_free(writer);
  return tar;
}

// Reads the files of a tar (an upload the test server received).
std::map<std::string, std::string> FilesIn(const std::string& tar) {
  std::map<std::string, std::string> files;
  archive* reader = archive_read_new();
  archive_read_support_format_tar(reader);
  archive_read_open_memory(reader, tar.data(), tar.size());
  archive_entry* entry = nullptr;
  while (archive_read_next_header(reader, &entry) == ARCHIVE_OK) {
    std::string data(static_cast<size_t>(archive_entry_size(entry)), '\0');
    if (!data.empty()) archive_read_data(reader, data.data(), data.size());
    files[archive_entry_pathname(entry)] =
        archive_entry_filetype(entry) == AE_IFDIR ? std::string("<dir>") : data;
  }
  archive_read_free(reader);
  return files;
}

const char* kNotFound = R"({"error":{"code":"not_found","message":"no such file"}})";

// A local scratch directory, removed after the test.
class CliWorkspaceCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/bulkhead-cp-test-XXXXXX";
    local_ = mkdtemp(dir_template);
  }
  void TearDown() override { fs::remove_all(local_); }
  fs::path local_;
};

TEST_F(CliWorkspaceCommands, CopyFileFromSandboxIntoALocalDirectoryKeepsItsMode) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/sb-1/files/stat?path=%2Fworkspace%2Fout.txt") {
      reply.Json(200, R"({"path":"/workspace/out.txt","name":"out.txt","type":"file","size":6,"mode":493})");
    } else if (request.target == "/v1/sandboxes/sb-1/files?path=%2Fworkspace%2Fout.txt") {
      reply.StartChunked("application/octet-stream");
      reply.Chunk("hel");
      reply.Chunk("lo\n");
      reply.EndChunked();
    } else {
      reply.Json(404, kNotFound);
    }
  });
  CliResult result = RunCli(server, {"cp", "sb-1:/workspace/out.txt", local_.string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(ReadFile(local_ / "out.txt"), "hello\n");
  EXPECT_EQ(fs::status(local_ / "out.txt").permissions(), fs::perms(0755));
  // Nothing else (no temporary file) is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(local_), fs::directory_iterator()), 1);
}

TEST_F(CliWorkspaceCommands, ACutOffDownloadLeavesTheOldFileAlone) {
  std::ofstream(local_ / "keep.txt") << "old";
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target.find("/files/stat") != std::string::npos) {
      reply.Json(200, R"({"path":"/w/a","name":"a","type":"file","size":100,"mode":420})");
    } else {
      // Starts the body, then hangs up before its end.
      reply.StartChunked("application/octet-stream");
      reply.Chunk("abc");
    }
  });
  CliResult result = RunCli(server, {"cp", "sb-1:/w/a", (local_ / "keep.txt").string()});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(ReadFile(local_ / "keep.txt"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(local_), fs::directory_iterator()), 1);
}

TEST_F(CliWorkspaceCommands, CopyDirectoryFromSandboxUnpacksUnderItsName) {
  std::string tar = TarOf({{"a.txt", "A"}, {"sub/b.txt", "B"}});
  TestServer server([tar](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/sb-1/files/stat?path=proj") {
      reply.Json(200, R"({"path":"/workspace/proj","name":"proj","type":"dir","size":4096,"mode":493})");
    } else if (request.target == "/v1/sandboxes/sb-1/files/archive?path=proj") {
      reply.StartChunked("application/x-tar");
      for (size_t at = 0; at < tar.size(); at += 1000) reply.Chunk(tar.substr(at, 1000));
      reply.EndChunked();
    } else {
      reply.Json(404, kNotFound);
    }
  });
  CliResult result = RunCli(server, {"cp", "sb-1:proj", local_.string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(ReadFile(local_ / "proj/a.txt"), "A");
  EXPECT_EQ(ReadFile(local_ / "proj/sub/b.txt"), "B");

  // To a path that does not exist yet: that path becomes the copy.
  result = RunCli(server, {"cp", "sb-1:proj", (local_ / "copy").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(ReadFile(local_ / "copy/sub/b.txt"), "B");
}

TEST_F(CliWorkspaceCommands, CopyFileIntoASandboxDirectoryStreamsItWithItsMode) {
  std::ofstream(local_ / "script.sh") << "#!/bin/sh\necho hi\n";
  fs::permissions(local_ / "script.sh", fs::perms(0750));
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/sb-1/files/stat?path=%2Fworkspace") {
      reply.Json(200, R"({"path":"/workspace","name":"workspace","type":"dir","size":4096,"mode":493})");
    } else if (request.method == "PUT") {
      reply.Json(201, R"({"path":"/workspace/script.sh","type":"file"})");
    } else {
      reply.Json(404, kNotFound);
    }
  });
  CliResult result = RunCli(server, {"cp", (local_ / "script.sh").string(), "sb-1:/workspace"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto requests = server.requests();
  const RecordedRequest* put =
      Find(requests, "PUT", "/v1/sandboxes/sb-1/files?path=%2Fworkspace%2Fscript.sh&mode=0750");
  ASSERT_NE(put, nullptr);
  EXPECT_EQ(put->body, "#!/bin/sh\necho hi\n");
  EXPECT_EQ(put->content_type, "application/octet-stream");
  EXPECT_FALSE(put->chunked);  // a file's size is known: Content-Length
}

TEST_F(CliWorkspaceCommands, CopyDirectoryIntoASandboxSendsATar) {
  fs::create_directories(local_ / "proj/sub");
  std::ofstream(local_ / "proj/a.txt") << "A";
  std::ofstream(local_ / "proj/sub/b.txt") << "B";
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target.find("/files/stat") != std::string::npos) {
      reply.Json(404, kNotFound);  // the destination does not exist yet
    } else {
      reply.Json(200, R"({"entries":4,"bytes":2})");
    }
  });
  CliResult result = RunCli(server, {"cp", (local_ / "proj").string(), "sb-1:/workspace/copy"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto requests = server.requests();
  const RecordedRequest* put = Find(requests, "PUT", "/v1/sandboxes/sb-1/files/archive?path=%2Fworkspace%2Fcopy");
  ASSERT_NE(put, nullptr);
  EXPECT_EQ(put->content_type, "application/x-tar");
  auto files = FilesIn(put->body);
  EXPECT_EQ(files["./a.txt"], "A");
  EXPECT_EQ(files["./sub/b.txt"], "B");
}

TEST_F(CliWorkspaceCommands, CopyFromStdinAndToStdout) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/sb-1/files/stat?path=notes.txt") {
      reply.Json(200, R"({"path":"/workspace/notes.txt","name":"notes.txt","type":"file","size":3,"mode":420})");
    } else if (request.method == "GET") {
      reply.StartChunked("application/octet-stream");
      reply.Chunk(std::string("\x00\xff", 2));
      reply.EndChunked();
    } else {
      reply.Json(201, R"({"path":"/workspace/notes.txt","type":"file"})");
    }
  });
  CliResult in = RunCli(server, {"cp", "-", "sb-1:notes.txt"}, "from stdin\n");
  ASSERT_EQ(in.exit_code, 0) << in.err;
  auto requests = server.requests();
  const RecordedRequest* put = Find(requests, "PUT", "/v1/sandboxes/sb-1/files?path=notes.txt");
  ASSERT_NE(put, nullptr);
  EXPECT_EQ(put->body, "from stdin\n");
  EXPECT_TRUE(put->chunked);

  CliResult out = RunCli(server, {"cp", "sb-1:notes.txt", "-"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out, std::string("\x00\xff", 2));
}

TEST_F(CliWorkspaceCommands, CopyNeedsExactlyOneSandboxSide) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(404, kNotFound); });
  CliResult local = RunCli(server, {"cp", "a", "b"});
  EXPECT_EQ(local.exit_code, 2);
  EXPECT_NE(local.err.find("ID:PATH"), std::string::npos) << local.err;
  EXPECT_EQ(RunCli(server, {"cp", "sb-1:a", "sb-2:b"}).exit_code, 2);
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(CliWorkspaceCommands, CopyOfAMissingSandboxPathSaysSo) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(404, kNotFound); });
  CliResult result = RunCli(server, {"cp", "sb-1:/nope", local_.string()});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("/nope"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("(not_found)"), std::string::npos) << result.err;
}

TEST_F(CliWorkspaceCommands, ListFilesShowsATableRelativeToTheDirectory) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/sb-1/files/stat?path=.") {
      reply.Json(200, R"({"path":"/workspace","name":"workspace","type":"dir","size":4096,"mode":493})");
    } else if (request.target == "/v1/sandboxes/sb-1/files/list?path=.&depth=2") {
      reply.Json(200, R"({"entries":[
        {"path":"/workspace/src","name":"src","type":"dir","size":4096,"mode":493,"mtime":"2026-01-02T03:04:05Z"},
        {"path":"/workspace/src/a.py","name":"a.py","type":"file","size":12,"mode":420,"mtime":"2026-01-02T03:04:05Z"},
        {"path":"/workspace/l","name":"l","type":"symlink","size":4,"mode":511,"mtime":"2026-01-02T03:04:05Z","target":"src"}
      ],"truncated":false})");
    } else {
      reply.Json(404, kNotFound);
    }
  });
  CliResult result = RunCli(server, {"ls", "sb-1", "-d", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = result.out.find('\n', at)) != std::string::npos; at = end + 1) {
    lines.push_back(result.out.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 4u) << result.out;
  EXPECT_EQ(lines[0].rfind("MODE", 0), 0u);
  EXPECT_NE(lines[1].find("l -> src"), std::string::npos);
  EXPECT_EQ(lines[2].rfind("drwxr-xr-x", 0), 0u);
  EXPECT_NE(lines[3].find(" src/a.py"), std::string::npos);

  CliResult as_json = RunCli(server, {"ls", "sb-1", "--json", "-d", "2"});
  ASSERT_EQ(as_json.exit_code, 0);
  EXPECT_EQ(json::parse(as_json.out)["entries"].size(), 3u);
}

TEST_F(CliWorkspaceCommands, ListOfAFileShowsThatFile) {
  TestServer server([](const RecordedRequest& request, Reply& reply) {
    if (request.target == "/v1/sandboxes/sb-1/files/stat?path=a.txt") {
      reply.Json(200, R"({"path":"/workspace/a.txt","name":"a.txt","type":"file","size":3,"mode":384})");
    } else {
      reply.Json(404, kNotFound);
    }
  });
  CliResult result = RunCli(server, {"ls", "sb-1", "a.txt"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("-rw-------   3 "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("a.txt\n"), std::string::npos);
}

TEST_F(CliWorkspaceCommands, SandboxFiltersDoNotApplyToAFileListing) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(404, kNotFound); });
  EXPECT_EQ(RunCli(server, {"ls", "sb-1", "--state", "running"}).exit_code, 2);
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(CliWorkspaceCommands, WatchPrintsEventsAsTheyCome) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.StartChunked("application/x-ndjson");
    reply.Chunk(R"({"type":"create","path":"/workspace/a","dir":false})" "\n" R"({"type":"write",)");
    reply.Chunk(R"("path":"/workspace/a","dir":false})" "\n");
    reply.Chunk(R"({"type":"create","path":"/workspace/d","dir":true})" "\n");
    reply.EndChunked();
  });
  CliResult result = RunCli(server, {"watch", "sb-1", "/workspace", "--no-recursive"});
  EXPECT_EQ(result.out, "create /workspace/a\nwrite  /workspace/a\ncreate /workspace/d/\n");
  // The stream only ends when the daemon ends it: that is reported.
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("watching /workspace"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("(stream_ended)"), std::string::npos) << result.err;
  EXPECT_EQ(server.requests()[0].target, "/v1/sandboxes/sb-1/files/watch?path=%2Fworkspace&recursive=false");
  EXPECT_EQ(server.requests()[0].accept, "application/x-ndjson");

  CliResult as_json = RunCli(server, {"watch", "sb-1", "--json"});
  EXPECT_EQ(json::parse(as_json.out.substr(0, as_json.out.find('\n')))["type"], "create");
  EXPECT_EQ(server.requests()[1].target, "/v1/sandboxes/sb-1/files/watch?path=.&recursive=true");
}

TEST_F(CliWorkspaceCommands, ExecDetachStartsABackgroundProcessAndPrintsItsPid) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(201, R"({"pid":42,"tag":"web","state":"running"})");
  });
  CliResult result =
      RunCli(server, {"exec", "-d", "--tag", "web", "--cwd", "/srv", "sb-1", "--", "python3", "-m", "http.server"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "42\n");
  auto requests = server.requests();
  const RecordedRequest* create = Find(requests, "POST", "/v1/sandboxes/sb-1/processes");
  ASSERT_NE(create, nullptr);
  json body = json::parse(create->body);
  EXPECT_EQ(body["cmd"], json({"python3", "-m", "http.server"}));
  EXPECT_EQ(body["tag"], "web");
  EXPECT_EQ(body["cwd"], "/srv");
}

TEST_F(CliWorkspaceCommands, ExecTagWithoutDetachOrStdinWithDetachIsAUsageError) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.Json(500, "{}"); });
  EXPECT_EQ(RunCli(server, {"exec", "--tag", "x", "sb-1", "--", "true"}).exit_code, 2);
  EXPECT_EQ(RunCli(server, {"exec", "-d", "-i", "sb-1", "--", "cat"}).exit_code, 2);
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(CliWorkspaceCommands, PsShowsTheProcessTable) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(200, R"({"processes":[{"pid":42,"tag":"web","cmd":["python3","-m","http.server"],
                       "state":"running","exit_code":null,"signal":null,"started_at":"2026-01-02T03:04:05Z"}]})");
  });
  CliResult result = RunCli(server, {"ps", "sb-1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.rfind("PID ", 0), 0u) << result.out;
  EXPECT_NE(result.out.find("42    web   running   -"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("python3 -m http.server\n"), std::string::npos);
  EXPECT_EQ(json::parse(RunCli(server, {"ps", "sb-1", "--json"}).out)["processes"][0]["pid"], 42);
}

TEST_F(CliWorkspaceCommands, LogsFollowSplitsStreamsAndExitsWithTheProcesssCode) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.StartChunked("application/x-ndjson");
    reply.Chunk(R"({"type":"gap","stream":"stdout","from":0,"to":100})" "\n");
    reply.Chunk(R"({"type":"stdout","data":"serving\n","offset":108})" "\n");
    reply.Chunk(R"({"type":"stderr","data_b64":"/w==","offset":1})" "\n");
    reply.Chunk(R"({"type":"exit","exit_code":3,"signal":null,"timed_out":false})" "\n");
    reply.EndChunked();
  });
  CliResult result = RunCli(server, {"logs", "-f", "sb-1", "web", "--offset", "5"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_EQ(result.out, "serving\n");
  EXPECT_EQ(result.err, "bulkhead: stdout bytes 0..100 are no longer kept\n\xff");
  EXPECT_EQ(server.requests()[0].target, "/v1/sandboxes/sb-1/processes/web/output?offset=5&follow=true");

  // Without -f the exit status is only information.
  EXPECT_EQ(RunCli(server, {"logs", "sb-1", "42"}).exit_code, 0);
  EXPECT_EQ(server.requests()[1].target, "/v1/sandboxes/sb-1/processes/42/output?offset=0&follow=false");
}

TEST_F(CliWorkspaceCommands, LogsOfAnUnknownProcessIsAnError) {
  TestServer server([](const RecordedRequest&, Reply& reply) {
    reply.Json(404, R"({"error":{"code":"process_not_found","message":"no process web"}})");
  });
  CliResult result = RunCli(server, {"logs", "sb-1", "web"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, "bulkhead: no process web (process_not_found)\n");
}

TEST_F(CliWorkspaceCommands, KillSendsTheSignalByNumber) {
  TestServer server([](const RecordedRequest&, Reply& reply) { reply.NoContent(); });
  ASSERT_EQ(RunCli(server, {"kill", "sb-1", "web"}).exit_code, 0);
  ASSERT_EQ(RunCli(server, {"kill", "-s", "sigkill", "sb-1", "42"}).exit_code, 0);
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].target, "/v1/sandboxes/sb-1/processes/web/signal");
  EXPECT_EQ(json::parse(requests[0].body), json({{"signal", 15}}));
  EXPECT_EQ(requests[1].target, "/v1/sandboxes/sb-1/processes/42/signal");
  EXPECT_EQ(json::parse(requests[1].body), json({{"signal", 9}}));

  CliResult unknown = RunCli(server, {"kill", "-s", "SIGFOO", "sb-1", "42"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("SIGFOO"), std::string::npos);
  EXPECT_EQ(server.requests().size(), 2u);
}

}  // namespace
}  // namespace bulkhead::cli
