// bulkhead-init's process table, run for real (ctl_protocol.h): background processes, listing,
// attaching (output from offsets, following, stdin, signals, resizing) and pseudo-terminals.
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"
#include "init_client.h"

namespace bulkhead {
namespace {

using init_testing::Client;
using init_testing::Clock;
using init_testing::Frame;
using init_testing::ProcessGone;
using init_testing::RssKib;
using init_testing::WaitUntilGone;
using nlohmann::json;

json Command(std::vector<std::string> argv) { return json{{"argv", argv}, {"env", json::array()}, {"cwd", "/"}}; }

json Background(std::vector<std::string> argv) {
  json request = Command(std::move(argv));
  request["background"] = true;
  return request;
}

json AttachRequest(pid_t pid, bool follow, uint64_t stdout_offset = 0, uint64_t stderr_offset = 0) {
  return json{{"pid", pid}, {"output", true}, {"follow", follow}, {"stdout_offset", stdout_offset},
              {"stderr_offset", stderr_offset}};
}

// What an attach connection received up to its last frame.
struct AttachOutcome {
  std::optional<json> attached;
  std::string out;
  std::string err;
  std::vector<json> gaps;
  std::optional<json> exit;
  std::optional<json> error;
  bool end = false;
  bool closed_after_last_frame = false;
};

// Reads frames until kExit, kEnd or kError.
AttachOutcome ReadAttach(Client& client) {
  AttachOutcome outcome;
  while (auto frame = client.Read()) {
    switch (frame->type) {
      case ctl::kAttached: outcome.attached = json::parse(frame->payload); break;
      case ctl::kStdout: outcome.out += frame->payload; break;
      case ctl::kStderr: outcome.err += frame->payload; break;
      case ctl::kGap: outcome.gaps.push_back(json::parse(frame->payload)); break;
      case ctl::kExit: outcome.exit = json::parse(frame->payload); break;
      case ctl::kError: outcome.error = json::parse(frame->payload); break;
      case ctl::kEnd: outcome.end = true; break;
      case ctl::kPong: break;
      default: ADD_FAILURE() << "unexpected frame type " << int(frame->type);
    }
    if (outcome.exit || outcome.error || outcome.end) {
      outcome.closed_after_last_frame = !client.Read(std::chrono::seconds(5)).has_value();
      break;
    }
  }
  return outcome;
}

// Reads kStdout until `text` appeared in it (or the connection ended); returns all read.
std::string ReadStdoutUntil(Client& client, const std::string& text) {
  std::string out;
  while (out.find(text) == std::string::npos) {
    auto frame = client.Read();
    if (!frame) break;
    if (frame->type == ctl::kStdout) out += frame->payload;
  }
  return out;
}

class InitProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/bulkhead-init-process-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    std::string failure = init_.Start(dir_);
    ASSERT_EQ(failure, "");
  }

  void TearDown() override {
    if (init_.pid() > 0) {
      int status = init_.Stop();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "init did not exit 0 on SIGTERM";
    }
    std::filesystem::remove_all(dir_);
  }

  // Starts a background process; returns kStarted's payload. The connection then ends.
  json Start(const json& request) {
    Client client(init_.socket_path());
    client.Send(ctl::kExec, request.dump());
    auto frame = client.Read();
    EXPECT_TRUE(frame && frame->type == ctl::kStarted) << (frame ? frame->payload : "no frame");
    if (!frame || frame->type != ctl::kStarted) return json::object();
    EXPECT_FALSE(client.Read(std::chrono::seconds(5)).has_value()) << "the connection should end after kStarted";
    return json::parse(frame->payload);
  }

  json List() {
    Client client(init_.socket_path());
    client.Send(ctl::kProcList);
    auto frame = client.Read();
    EXPECT_TRUE(frame && frame->type == ctl::kResult);
    if (!frame || frame->type != ctl::kResult) return json::array();
    EXPECT_FALSE(client.Read(std::chrono::seconds(5)).has_value());
    return json::parse(frame->payload)["processes"];
  }

  std::optional<json> Listed(pid_t pid) {
    for (const auto& process : List()) {
      if (process["pid"] == pid) return process;
    }
    return std::nullopt;
  }

  // The listed process once it has exited (its output read to the end).
  json WaitUntilExited(pid_t pid) {
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      auto process = Listed(pid);
      if (process && (*process)["state"] == "exited") return *process;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "process " << pid << " did not exit";
    return json::object();
  }

  AttachOutcome Attach(const json& request) {
    Client client(init_.socket_path());
    client.Send(ctl::kProcAttach, request.dump());
    return ReadAttach(client);
  }

  // An attach connection for driving the process, after its kAttached.
  std::unique_ptr<Client> Driver(pid_t pid) {
    auto client = std::make_unique<Client>(init_.socket_path());
    client->Send(ctl::kProcAttach, json{{"pid", pid}, {"output", false}}.dump());
    auto attached = client->Read();
    EXPECT_TRUE(attached && attached->type == ctl::kAttached);
    return client;
  }

  // kPing on an attach connection: returns once every frame sent before it was applied.
  static void Barrier(Client& client) {
    client.Send(ctl::kPing);
    auto pong = client.Read();
    ASSERT_TRUE(pong);
    EXPECT_EQ(pong->type, ctl::kPong);
  }

  std::string dir_;
  init_testing::RunningInit init_;
};

TEST_F(InitProcessTest, BackgroundProcessIsListedAndKeepsItsOutput) {
  json request = Background({"sh", "-c", "echo one; echo two >&2; echo three"});
  request["tag"] = "greeter";
  json started = Start(request);
  pid_t pid = started["pid"].get<pid_t>();
  ASSERT_GT(pid, 0);
  const json& process = started["process"];
  EXPECT_EQ(process["pid"], pid);
  EXPECT_EQ(process["tag"], "greeter");
  EXPECT_EQ(process["cmd"], json({"sh", "-c", "echo one; echo two >&2; echo three"}));
  EXPECT_EQ(process["state"], "running");
  EXPECT_TRUE(process["exit_code"].is_null());
  EXPECT_TRUE(process["exited_at"].is_null());
  EXPECT_TRUE(process["pty"].is_null());
  std::regex rfc3339(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  EXPECT_TRUE(std::regex_match(process["started_at"].get<std::string>(), rfc3339)) << process["started_at"];

  json exited = WaitUntilExited(pid);
  EXPECT_EQ(exited["exit_code"], 0);
  EXPECT_TRUE(exited["signal"].is_null());
  EXPECT_TRUE(std::regex_match(exited["exited_at"].get<std::string>(), rfc3339)) << exited["exited_at"];
  EXPECT_GE(exited["exited_at"].get<std::string>(), exited["started_at"].get<std::string>());
  EXPECT_EQ(exited["stdout_offset"], 10);
  EXPECT_EQ(exited["stderr_offset"], 4);
  EXPECT_EQ(exited["stdout_start"], 0);
  EXPECT_EQ(exited["stderr_start"], 0);

  AttachOutcome outcome = Attach(AttachRequest(pid, /*follow=*/false));
  ASSERT_TRUE(outcome.attached);
  EXPECT_EQ((*outcome.attached)["stdout_offset"], 0);
  EXPECT_EQ((*outcome.attached)["stderr_offset"], 0);
  EXPECT_EQ((*outcome.attached)["process"]["state"], "exited");
  EXPECT_EQ(outcome.out, "one\nthree\n");
  EXPECT_EQ(outcome.err, "two\n");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
  EXPECT_EQ((*outcome.exit)["timed_out"], false);
  EXPECT_GE((*outcome.exit)["duration_ms"].get<double>(), 0.0);
  EXPECT_TRUE(outcome.closed_after_last_frame);
}

TEST_F(InitProcessTest, AttachFromOffsetsGetsExactlyTheRest) {
  pid_t pid = Start(Background({"sh", "-c", "seq 1 20000; echo done >&2"}))["pid"].get<pid_t>();
  WaitUntilExited(pid);
  std::string all;
  for (int i = 1; i <= 20000; ++i) all += std::to_string(i) + "\n";

  AttachOutcome whole = Attach(AttachRequest(pid, false));
  EXPECT_TRUE(whole.out == all) << whole.out.size() << " of " << all.size() << " bytes";

  for (uint64_t offset : {uint64_t(1), uint64_t(4096), uint64_t(all.size() - 3), uint64_t(all.size())}) {
    AttachOutcome rest = Attach(AttachRequest(pid, false, offset, 5));
    ASSERT_TRUE(rest.attached);
    EXPECT_EQ((*rest.attached)["stdout_offset"], offset);
    EXPECT_EQ((*rest.attached)["stderr_offset"], 5);
    EXPECT_TRUE(rest.out == all.substr(offset)) << "from " << offset;
    EXPECT_EQ(rest.err, "");
    EXPECT_TRUE(rest.exit);
  }
  // An offset past the end starts at the end.
  AttachOutcome beyond = Attach(AttachRequest(pid, false, all.size() + 100, 0));
  ASSERT_TRUE(beyond.attached);
  EXPECT_EQ((*beyond.attached)["stdout_offset"], all.size());
  EXPECT_EQ(beyond.out, "");
  EXPECT_EQ(beyond.err, "done\n");
}

TEST_F(InitProcessTest, RingKeepsTheNewestOutputAndSaysWhereItStarts) {
  constexpr size_t kTotal = 6u << 20;
  pid_t pid = Start(Background({"sh", "-c", "yes abcdefghij | head -c " + std::to_string(kTotal)}))["pid"].get<pid_t>();
  json exited = WaitUntilExited(pid);
  EXPECT_EQ(exited["stdout_offset"], kTotal);
  uint64_t start = exited["stdout_start"].get<uint64_t>();
  EXPECT_GT(start, 0u);
  EXPECT_GE(start, kTotal - ctl::kProcessRingBytes);

  AttachOutcome outcome = Attach(AttachRequest(pid, false));
  ASSERT_TRUE(outcome.attached);
  EXPECT_EQ((*outcome.attached)["stdout_offset"], start);  // later than the 0 requested
  EXPECT_EQ(outcome.out.size(), kTotal - start);
  bool pattern_ok = true;
  for (size_t i = 0; i < outcome.out.size(); ++i) {
    uint64_t at = start + i;
    char expected = (at % 11 == 10) ? '\n' : char('a' + at % 11);
    if (outcome.out[i] != expected) {
      pattern_ok = false;
      break;
    }
  }
  EXPECT_TRUE(pattern_ok);
  EXPECT_TRUE(outcome.gaps.empty());
  EXPECT_TRUE(outcome.exit);
}

TEST_F(InitProcessTest, FollowerThatFellBehindGetsAGapAndThenTheRest) {
  constexpr size_t kTotal = 20u << 20;
  pid_t pid = Start(Background({"sh", "-c", "read go; yes abcdefghij | head -c " + std::to_string(kTotal)}))["pid"]
                  .get<pid_t>();
  Client follower(init_.socket_path());
  follower.Send(ctl::kProcAttach, AttachRequest(pid, /*follow=*/true).dump());
  auto attached = follower.Read();
  ASSERT_TRUE(attached && attached->type == ctl::kAttached);

  // The follower reads nothing until all the output was produced: far more than the ring.
  auto driver = Driver(pid);
  driver->Send(ctl::kStdin, "go\n");
  Barrier(*driver);
  WaitUntilExited(pid);
  // The ring, not the slow reader, bounds what init holds.
  long rss = RssKib(init_.pid());
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, long(ctl::kProcessRingBytes / 1024) + 8 * 1024) << "init RSS " << rss << " KiB";

  uint64_t offset = 0;
  size_t received = 0;
  int gaps = 0;
  bool pattern_ok = true;
  std::optional<json> exit;
  while (auto frame = follower.Read()) {
    if (frame->type == ctl::kGap) {
      json gap = json::parse(frame->payload);
      EXPECT_GT(gap["stdout_offset"].get<uint64_t>(), offset);
      offset = gap["stdout_offset"].get<uint64_t>();
      ++gaps;
    } else if (frame->type == ctl::kStdout) {
      for (char c : frame->payload) {
        char expected = (offset % 11 == 10) ? '\n' : char('a' + offset % 11);
        if (c != expected) pattern_ok = false;
        ++offset;
      }
      received += frame->payload.size();
    } else if (frame->type == ctl::kExit) {
      exit = json::parse(frame->payload);
      break;
    } else {
      ADD_FAILURE() << "unexpected frame type " << int(frame->type);
    }
  }
  EXPECT_GE(gaps, 1);
  EXPECT_TRUE(pattern_ok);
  EXPECT_EQ(offset, kTotal);  // it ends with the last byte produced
  EXPECT_LT(received, kTotal);
  ASSERT_TRUE(exit);
  EXPECT_EQ((*exit)["exit_code"], 0);
}

TEST_F(InitProcessTest, HoldingFollowerStartedWithTheProcessMissesNothing) {
  constexpr size_t kTotal = 20u << 20;
  json request = Background({"sh", "-c", "yes abcdefghij | head -c " + std::to_string(kTotal)});
  request["attach"] = true;
  Client follower(init_.socket_path());
  follower.Send(ctl::kExec, request.dump());
  auto started = follower.Read();
  ASSERT_TRUE(started && started->type == ctl::kStarted) << (started ? started->payload : "no frame");
  const pid_t pid = json::parse(started->payload)["pid"].get<pid_t>();
  auto attached = follower.Read();
  ASSERT_TRUE(attached && attached->type == ctl::kAttached);

  // While the follower reads nothing the process cannot get far: init stopped reading it.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto listed = Listed(pid);
  ASSERT_TRUE(listed);
  EXPECT_EQ((*listed)["state"], "running");
  EXPECT_LT((*listed)["stdout_offset"].get<uint64_t>(), ctl::kProcessRingBytes);
  long rss = RssKib(init_.pid());
  EXPECT_LT(rss, long(ctl::kProcessRingBytes / 1024) + 8 * 1024) << "init RSS " << rss << " KiB";

  uint64_t offset = 0;
  bool pattern_ok = true;
  std::optional<json> exit;
  while (auto frame = follower.Read()) {
    if (frame->type == ctl::kStdout) {
      for (char c : frame->payload) {
        char expected = (offset % 11 == 10) ? '\n' : char('a' + offset % 11);
        if (c != expected) pattern_ok = false;
        ++offset;
      }
    } else if (frame->type == ctl::kExit) {
      exit = json::parse(frame->payload);
      break;
    } else {
      ADD_FAILURE() << "unexpected frame type " << int(frame->type);  // never a kGap
    }
  }
  EXPECT_TRUE(pattern_ok);
  EXPECT_EQ(offset, kTotal);
  ASSERT_TRUE(exit);
  EXPECT_EQ((*exit)["exit_code"], 0);
}

TEST_F(InitProcessTest, TwoFollowersAndAStdinWriterShareOneProcess) {
  pid_t pid = Start(Background({"cat"}))["pid"].get<pid_t>();
  Client first(init_.socket_path()), second(init_.socket_path());
  first.Send(ctl::kProcAttach, AttachRequest(pid, true).dump());
  second.Send(ctl::kProcAttach, AttachRequest(pid, true).dump());
  auto driver = Driver(pid);

  driver->Send(ctl::kStdin, "hello\n");
  Barrier(*driver);
  driver->Send(ctl::kStdin, "world\n");
  driver->Send(ctl::kStdinClose);
  Barrier(*driver);

  for (Client* follower : {&first, &second}) {
    AttachOutcome outcome = ReadAttach(*follower);
    ASSERT_TRUE(outcome.attached);
    EXPECT_EQ(outcome.out, "hello\nworld\n");
    ASSERT_TRUE(outcome.exit);
    EXPECT_EQ((*outcome.exit)["exit_code"], 0);
    EXPECT_TRUE(outcome.closed_after_last_frame);
  }
}

TEST_F(InitProcessTest, LargeStdinThroughAnAttachArrivesIntact) {
  pid_t pid = Start(Background({"sh", "-c", "wc -c; exit 0"}))["pid"].get<pid_t>();
  auto driver = Driver(pid);
  std::string chunk(60000, 'x');
  constexpr int kChunks = 100;  // 6 MB: far beyond the stdin buffer
  for (int i = 0; i < kChunks; ++i) driver->Send(ctl::kStdin, chunk);
  driver->Send(ctl::kStdinClose);
  Barrier(*driver);
  AttachOutcome outcome = Attach(AttachRequest(pid, true));
  EXPECT_EQ(std::atol(outcome.out.c_str()), long(chunk.size()) * kChunks) << outcome.out;
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
}

TEST_F(InitProcessTest, NonFollowAttachOfARunningProcessEndsWithEnd) {
  pid_t pid = Start(Background({"sh", "-c", "echo ready; exec sleep 1000"}))["pid"].get<pid_t>();
  AttachOutcome outcome;
  // "ready" may not have been read yet by init: attach until it is in the ring.
  auto deadline = Clock::now() + std::chrono::seconds(20);
  do {
    outcome = Attach(AttachRequest(pid, false));
  } while (outcome.out.empty() && Clock::now() < deadline);
  EXPECT_EQ(outcome.out, "ready\n");
  EXPECT_TRUE(outcome.end);
  EXPECT_FALSE(outcome.exit);
  EXPECT_TRUE(outcome.closed_after_last_frame);
  EXPECT_FALSE(ProcessGone(pid));  // an attach ending never affects the process
  ::kill(pid, SIGKILL);
}

TEST_F(InitProcessTest, SignalGoesToTheProcessGroup) {
  pid_t pid = Start(Background({"sh", "-c", "sleep 1000 & echo $!; wait"}))["pid"].get<pid_t>();
  Client follower(init_.socket_path());
  follower.Send(ctl::kProcAttach, AttachRequest(pid, true).dump());
  std::string out = ReadStdoutUntil(follower, "\n");
  pid_t sleeper = std::atoi(out.c_str());
  ASSERT_GT(sleeper, 0) << out;

  auto driver = Driver(pid);
  driver->Send(ctl::kSignal, json{{"signal", 15}}.dump());
  Barrier(*driver);
  AttachOutcome outcome = ReadAttach(follower);
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["signal"], 15);
  EXPECT_TRUE((*outcome.exit)["exit_code"].is_null());
  EXPECT_TRUE(WaitUntilGone(sleeper)) << "the signal should reach the whole group";
  json exited = WaitUntilExited(pid);
  EXPECT_EQ(exited["signal"], 15);
}

TEST_F(InitProcessTest, ProcessOutlivesTheConnectionThatStartedIt) {
  pid_t pid = Start(Background({"sleep", "1000"}))["pid"].get<pid_t>();
  // Start() saw the connection end; the process is the table's.
  auto listed = Listed(pid);
  ASSERT_TRUE(listed);
  EXPECT_EQ((*listed)["state"], "running");
  EXPECT_FALSE(ProcessGone(pid));
  // An attach that closes does not affect it either.
  Driver(pid)->Close();
  EXPECT_FALSE(ProcessGone(pid));
  auto driver = Driver(pid);
  driver->Send(ctl::kSignal, json{{"signal", 9}}.dump());
  Barrier(*driver);
  EXPECT_EQ(WaitUntilExited(pid)["signal"], 9);
}

TEST_F(InitProcessTest, TimeoutKillsABackgroundProcess) {
  json request = Background({"sleep", "1000"});
  request["timeout_ms"] = 200;
  pid_t pid = Start(request)["pid"].get<pid_t>();
  AttachOutcome outcome = Attach(AttachRequest(pid, true));
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["timed_out"], true);
  EXPECT_EQ((*outcome.exit)["signal"], 9);
  EXPECT_GE((*outcome.exit)["duration_ms"].get<double>(), 150.0);
}

TEST_F(InitProcessTest, ListIsSortedByPidAndKeepsAtMostTheExitedCap) {
  constexpr size_t kExtra = 5;
  std::vector<pid_t> pids;
  for (size_t i = 0; i < ctl::kMaxExitedProcesses + kExtra; ++i) {
    pids.push_back(Start(Background({"true"}))["pid"].get<pid_t>());
  }
  json processes;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    processes = List();
    bool all_exited = std::all_of(processes.begin(), processes.end(), [](const json& p) { return p["state"] == "exited"; });
    bool last_listed = std::any_of(processes.begin(), processes.end(), [&](const json& p) { return p["pid"] == pids.back(); });
    if (all_exited && last_listed && processes.size() == ctl::kMaxExitedProcesses) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(processes.size(), ctl::kMaxExitedProcesses);
  for (size_t i = 1; i < processes.size(); ++i) {
    EXPECT_LT(processes[i - 1]["pid"].get<pid_t>(), processes[i]["pid"].get<pid_t>());
  }
  // The first ones to finish are forgotten: attaching to one of them is not_found.
  size_t forgotten = 0;
  for (pid_t pid : pids) {
    bool listed = std::any_of(processes.begin(), processes.end(), [&](const json& p) { return p["pid"] == pid; });
    if (!listed) {
      ++forgotten;
      AttachOutcome outcome = Attach(AttachRequest(pid, false));
      ASSERT_TRUE(outcome.error);
      EXPECT_EQ((*outcome.error)["code"], "not_found");
    }
  }
  EXPECT_EQ(forgotten, kExtra);
}

TEST_F(InitProcessTest, BadAttachRequestsAreErrors) {
  AttachOutcome unknown = Attach(json{{"pid", 999999}});
  ASSERT_TRUE(unknown.error);
  EXPECT_EQ((*unknown.error)["code"], "not_found");
  EXPECT_TRUE(unknown.closed_after_last_frame);
  for (const json& bad : {json{{"pid", "12"}}, json{{"pid", -1}}, json{{"pid", 1}, {"follow", "yes"}},
                          json{{"pid", 1}, {"stdout_offset", -5}}}) {
    AttachOutcome outcome = Attach(bad);
    ASSERT_TRUE(outcome.error) << bad;
    EXPECT_EQ((*outcome.error)["code"], "invalid_argument") << bad;
  }
  // A malformed control frame ends the attach, not the process.
  pid_t pid = Start(Background({"sleep", "1000"}))["pid"].get<pid_t>();
  Client client(init_.socket_path());
  client.Send(ctl::kProcAttach, json{{"pid", pid}, {"output", false}}.dump());
  client.Send(ctl::kSignal, json{{"signal", 0}}.dump());
  AttachOutcome outcome = ReadAttach(client);
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ((*outcome.error)["code"], "invalid_argument");
  EXPECT_FALSE(ProcessGone(pid));
  ::kill(pid, SIGKILL);
}

TEST_F(InitProcessTest, ShellOnAPtyAnswersResizesAndEndsOnEof) {
  json request = Background({"sh"});
  request["pty"] = {{"cols", 80}, {"rows", 24}};
  json started = Start(request);
  pid_t pid = started["pid"].get<pid_t>();
  EXPECT_EQ(started["process"]["pty"], json({{"cols", 80}, {"rows", 24}}));

  Client terminal(init_.socket_path());
  terminal.Send(ctl::kProcAttach, AttachRequest(pid, true).dump());
  auto attached = terminal.Read();
  ASSERT_TRUE(attached && attached->type == ctl::kAttached);

  terminal.Send(ctl::kStdin, "echo $((6*7))\n");
  EXPECT_NE(ReadStdoutUntil(terminal, "42\r\n").find("42\r\n"), std::string::npos);
  terminal.Send(ctl::kStdin, "tty; echo $TERM\n");
  std::string out = ReadStdoutUntil(terminal, "xterm-256color\r\n");
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(/dev/pts/\d+\r\n)"))) << out;
  EXPECT_NE(out.find("xterm-256color\r\n"), std::string::npos) << out;
  terminal.Send(ctl::kStdin, "stty size\n");
  EXPECT_NE(ReadStdoutUntil(terminal, "24 80\r\n").find("24 80\r\n"), std::string::npos);
  terminal.Send(ctl::kResize, json{{"cols", 120}, {"rows", 40}}.dump());
  terminal.Send(ctl::kStdin, "stty size\n");
  EXPECT_NE(ReadStdoutUntil(terminal, "40 120\r\n").find("40 120\r\n"), std::string::npos);
  EXPECT_EQ((*Listed(pid))["pty"], json({{"cols", 120}, {"rows", 40}}));

  // End of input on a terminal is its EOF character: the shell exits as on ^D.
  terminal.Send(ctl::kStdinClose);
  AttachOutcome outcome = ReadAttach(terminal);
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
  EXPECT_EQ(outcome.err, "");
}

TEST_F(InitProcessTest, ForegroundCommandOnAPty) {
  {
    Client client(init_.socket_path());
    json request = Command({"sh", "-c", "tty; stty size; echo $TERM; echo err >&2; exit 3"});
    request["pty"] = {{"cols", 100}, {"rows", 30}};
    client.Send(ctl::kExec, request.dump());
    std::string out;
    std::optional<json> exit;
    while (auto frame = client.Read()) {
      if (frame->type == ctl::kStdout) out += frame->payload;
      if (frame->type == ctl::kStderr) ADD_FAILURE() << "a pty has no separate stderr";
      if (frame->type == ctl::kExit) {
        exit = json::parse(frame->payload);
        break;
      }
    }
    EXPECT_TRUE(std::regex_search(out, std::regex(R"(^/dev/pts/\d+\r\n30 100\r\nxterm-256color\r\nerr\r\n$)"))) << out;
    ASSERT_TRUE(exit);
    EXPECT_EQ((*exit)["exit_code"], 3);
  }
  {
    // kStdinClose is ^D: cat sees the end of its input.
    Client client(init_.socket_path());
    json request = Command({"cat"});
    request["pty"] = json::object();
    request["stdin"] = true;
    client.Send(ctl::kExec, request.dump());
    client.Send(ctl::kStdin, "hi\n");
    client.Send(ctl::kResize, json{{"cols", 50}, {"rows", 10}}.dump());
    client.Send(ctl::kStdinClose);
    std::string out;
    std::optional<json> exit;
    while (auto frame = client.Read()) {
      if (frame->type == ctl::kStdout) out += frame->payload;
      if (frame->type == ctl::kExit) {
        exit = json::parse(frame->payload);
        break;
      }
    }
    EXPECT_NE(out.find("hi\r\n"), std::string::npos) << out;
    ASSERT_TRUE(exit);
    EXPECT_EQ((*exit)["exit_code"], 0);
  }
  {
    // Without "stdin" a program on a pty reads the end of input at once, as from /dev/null.
    Client client(init_.socket_path());
    json request = Command({"cat"});
    request["pty"] = json::object();
    client.Send(ctl::kExec, request.dump());
    std::optional<json> exit;
    while (auto frame = client.Read()) {
      if (frame->type == ctl::kExit) {
        exit = json::parse(frame->payload);
        break;
      }
    }
    ASSERT_TRUE(exit);
    EXPECT_EQ((*exit)["exit_code"], 0);
  }
}

TEST_F(InitProcessTest, SigtermKillsBackgroundProcesses) {
  pid_t pid = Start(Background({"sleep", "1000"}))["pid"].get<pid_t>();
  int status = init_.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(WaitUntilGone(pid));
}

}  // namespace
}  // namespace bulkhead
