// bulkhead-init, run for real: the test starts the binary (built next to unit-tests) with a
// listening socket on fd 3, as the native runtime does, and speaks ctl_protocol.h to it. Init
// is not PID 1 here, so it runs as a child subreaper.
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"
#include "common/read_file.h"
#include "init_client.h"

namespace bulkhead {
namespace {

using init_testing::Client;
using init_testing::Clock;
using init_testing::ProcessGone;
using init_testing::RssKib;
using init_testing::WaitUntilGone;
using nlohmann::json;

// The parent pid of `pid` from /proc, or -1.
pid_t ParentOf(pid_t pid) {
  std::string text = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat").value_or("");
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream rest(text.substr(paren + 2));
  char state;
  pid_t ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

// Everything a command sent, up to its last frame.
struct Outcome {
  std::optional<json> started;
  std::string out;
  std::string err;
  std::optional<json> exit;
  std::optional<json> error;
  bool closed_after_last_frame = false;
};

Outcome ReadUntilEnd(Client& client, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Outcome outcome;
  while (auto frame = client.Read(timeout)) {
    switch (frame->type) {
      case ctl::kStarted: outcome.started = json::parse(frame->payload); break;
      case ctl::kStdout: outcome.out += frame->payload; break;
      case ctl::kStderr: outcome.err += frame->payload; break;
      case ctl::kExit: outcome.exit = json::parse(frame->payload); break;
      case ctl::kError: outcome.error = json::parse(frame->payload); break;
      default: ADD_FAILURE() << "unexpected frame type " << int(frame->type);
    }
    if (outcome.exit || outcome.error) {
      outcome.closed_after_last_frame = !client.Read(std::chrono::seconds(5)).has_value();
      break;
    }
  }
  return outcome;
}

void SendExec(Client& client, const json& request) { client.Send(ctl::kExec, request.dump()); }

json Exec(std::vector<std::string> argv) { return json{{"argv", argv}, {"env", json::array()}, {"cwd", "/"}}; }

class InitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/bulkhead-init-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    // Fd 9 is a deliberately leaked descriptor: no command may see it (nor init's listener, fd 3).
    std::string failure = init_.Start(dir_, 9);
    ASSERT_EQ(failure, "");
    socket_path_ = init_.socket_path();
  }

  void TearDown() override {
    if (init_.pid() > 0) {
      int status = init_.Stop();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "init did not exit 0 on SIGTERM";
    }
    std::filesystem::remove_all(dir_);
  }

  Outcome Run(const json& request) {
    Client client(socket_path_);
    EXPECT_TRUE(client.connected());
    SendExec(client, request);
    return ReadUntilEnd(client);
  }

  std::string dir_;
  init_testing::RunningInit init_;
  std::string socket_path_;
};

TEST_F(InitTest, EchoPrintsOutputAndExitsZero) {
  Outcome outcome = Run(Exec({"echo", "hello"}));
  ASSERT_TRUE(outcome.started);
  EXPECT_GT((*outcome.started)["pid"].get<int>(), 0);
  EXPECT_EQ(outcome.out, "hello\n");
  EXPECT_EQ(outcome.err, "");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
  EXPECT_TRUE((*outcome.exit)["signal"].is_null());
  EXPECT_EQ((*outcome.exit)["timed_out"], false);
  EXPECT_GE((*outcome.exit)["duration_ms"].get<double>(), 0.0);
  EXPECT_TRUE(outcome.closed_after_last_frame);
}

TEST_F(InitTest, ExitCodeIsReported) {
  Outcome outcome = Run(Exec({"sh", "-c", "exit 3"}));
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 3);
  EXPECT_TRUE((*outcome.exit)["signal"].is_null());
}

TEST_F(InitTest, StderrIsSeparateFromStdout) {
  Outcome outcome = Run(Exec({"sh", "-c", "echo out; echo err >&2"}));
  EXPECT_EQ(outcome.out, "out\n");
  EXPECT_EQ(outcome.err, "err\n");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
}

TEST_F(InitTest, StdinRoundTripsThroughCat) {
  Client client(socket_path_);
  json request = Exec({"cat"});
  request["stdin"] = true;
  SendExec(client, request);
  // Megabytes, written while output is read, so both directions hit their bounds.
  std::string input;
  for (int i = 0; input.size() < 4 * 1024 * 1024; ++i) input += "line " + std::to_string(i) + "\n";
  std::thread writer([&] {
    for (size_t off = 0; off < input.size(); off += 60000) client.Send(ctl::kStdin, input.substr(off, 60000));
    client.Send(ctl::kStdinClose);
  });
  Outcome outcome = ReadUntilEnd(client);
  client.Shutdown();
  writer.join();
  EXPECT_TRUE(outcome.out == input) << "got " << outcome.out.size() << " of " << input.size() << " bytes";
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
}

TEST_F(InitTest, WithoutStdinTheCommandReadsDevNull) {
  Outcome outcome = Run(Exec({"cat"}));  // would hang on a pipe nobody closes
  EXPECT_EQ(outcome.out, "");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
}

TEST_F(InitTest, MissingExecutableExits127WithMessage) {
  Outcome outcome = Run(Exec({"bulkhead-no-such-program"}));
  EXPECT_TRUE(outcome.started);
  EXPECT_EQ(outcome.err, "bulkhead: exec bulkhead-no-such-program: No such file or directory\n");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 127);
}

TEST_F(InitTest, NonExecutableFileExits126) {
  std::string file = dir_ + "/not-executable";
  std::ofstream(file) << "data\n";
  Outcome outcome = Run(Exec({file}));
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 126);
  EXPECT_EQ(outcome.err, "bulkhead: exec " + file + ": Permission denied\n");
}

TEST_F(InitTest, MissingCwdIsNotFoundError) {
  json request = Exec({"true"});
  request["cwd"] = "/bulkhead-no-such-dir";
  Outcome outcome = Run(request);
  EXPECT_FALSE(outcome.started);
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ((*outcome.error)["code"], "not_found");
  EXPECT_TRUE(outcome.closed_after_last_frame);
}

TEST_F(InitTest, UnknownUserIsNotFoundError) {
  json request = Exec({"true"});
  request["user"] = "bulkhead-no-such-user";
  Outcome outcome = Run(request);
  EXPECT_FALSE(outcome.started);
  ASSERT_TRUE(outcome.error);
  EXPECT_EQ((*outcome.error)["code"], "not_found");
}

TEST_F(InitTest, RunsAsRequestedUserAndGroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to change uid";
  json request = Exec({"sh", "-c", "id -u; id -g; id -G; echo $HOME"});
  request["user"] = "1234:4321";
  Outcome outcome = Run(request);
  EXPECT_EQ(outcome.out, "1234\n4321\n4321\n/\n");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);

  // A name comes from /etc/passwd, and so do USER and LOGNAME.
  request = Exec({"sh", "-c", "id -un; echo $USER $LOGNAME"});
  request["user"] = "nobody";
  outcome = Run(request);
  EXPECT_EQ(outcome.out, "nobody\nnobody nobody\n");
}

TEST_F(InitTest, FillsDefaultEnvironmentButNoTerm) {
  Outcome outcome = Run(Exec({"/usr/bin/env"}));
  EXPECT_NE(outcome.out.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"), std::string::npos)
      << outcome.out;
  EXPECT_NE(outcome.out.find("HOME="), std::string::npos) << outcome.out;
  EXPECT_EQ(outcome.out.find("TERM="), std::string::npos) << outcome.out;

  json request = Exec({"/usr/bin/env"});
  request["env"] = {"PATH=/bin", "FOO=bar", "HOME=/work"};
  outcome = Run(request);
  EXPECT_NE(outcome.out.find("PATH=/bin\n"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("FOO=bar\n"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("HOME=/work\n"), std::string::npos) << outcome.out;
  EXPECT_EQ(outcome.out.find("PATH=/usr/local"), std::string::npos) << outcome.out;
}

TEST_F(InitTest, CommandInheritsNoDescriptorsAboveStderr) {
  // Fd 3 is init's listening socket and fd 9 a descriptor leaked into init: neither may pass.
  Outcome outcome = Run(Exec({"sh", "-c", "for i in 3 4 5 6 7 8 9 10 11 12; do [ -e /proc/$$/fd/$i ] && echo $i; done; true"}));
  EXPECT_EQ(outcome.out, "");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
}

TEST_F(InitTest, TimeoutKillsWholeProcessGroup) {
  json request = Exec({"sh", "-c", "sleep 1000 & echo $!; sleep 1000 & echo $!; wait"});
  request["timeout_ms"] = 300;
  Outcome outcome = Run(request);
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["timed_out"], true);
  EXPECT_EQ((*outcome.exit)["signal"], 9);
  EXPECT_TRUE((*outcome.exit)["exit_code"].is_null());
  EXPECT_GE((*outcome.exit)["duration_ms"].get<double>(), 250.0);

  std::istringstream pids(outcome.out);
  pid_t pid;
  int children = 0;
  while (pids >> pid) {
    ++children;
    EXPECT_TRUE(WaitUntilGone(pid)) << "background child " << pid << " survived the timeout";
  }
  EXPECT_EQ(children, 2);
  pid_t group = (*outcome.started)["pid"].get<pid_t>();
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (::kill(-group, 0) == 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(::kill(-group, 0), -1) << "a member of the process group survived";
}

TEST_F(InitTest, DisconnectKillsCommand) {
  Client client(socket_path_);
  SendExec(client, Exec({"sh", "-c", "echo ready; exec sleep 1000"}));
  auto started = client.Read();
  ASSERT_TRUE(started && started->type == ctl::kStarted);
  pid_t pid = json::parse(started->payload)["pid"].get<pid_t>();
  auto ready = client.Read();
  ASSERT_TRUE(ready && ready->type == ctl::kStdout);
  client.Close();
  EXPECT_TRUE(WaitUntilGone(pid));
}

TEST_F(InitTest, SignalFrameSignalsTheCommand) {
  Client client(socket_path_);
  SendExec(client, Exec({"sleep", "1000"}));
  auto started = client.Read();
  ASSERT_TRUE(started && started->type == ctl::kStarted);
  client.Send(ctl::kSignal, json{{"signal", 15}}.dump());
  Outcome outcome = ReadUntilEnd(client);
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["signal"], 15);
  EXPECT_TRUE((*outcome.exit)["exit_code"].is_null());
  EXPECT_EQ((*outcome.exit)["timed_out"], false);
}

TEST_F(InitTest, LargeOutputArrivesIntactWithBoundedMemory) {
  constexpr size_t kTotal = 50u * 1024 * 1024;
  Client client(socket_path_);
  SendExec(client, Exec({"sh", "-c", "yes abcdefghij | head -c " + std::to_string(kTotal)}));
  // Not reading for a while: the producer must be held back, not buffered inside init.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  long rss_while_blocked = RssKib(init_.pid());

  size_t total = 0;
  bool pattern_ok = true;
  std::optional<json> exit;
  while (auto frame = client.Read()) {
    if (frame->type == ctl::kStdout) {
      for (char c : frame->payload) {
        char expected = (total % 11 == 10) ? '\n' : char('a' + total % 11);
        if (c != expected) pattern_ok = false;
        ++total;
      }
    } else if (frame->type == ctl::kExit) {
      exit = json::parse(frame->payload);
      break;
    }
  }
  long rss_after = RssKib(init_.pid());
  EXPECT_EQ(total, kTotal);
  EXPECT_TRUE(pattern_ok);
  ASSERT_TRUE(exit);
  EXPECT_EQ((*exit)["exit_code"], 0);
  EXPECT_GT(rss_while_blocked, 0);
  EXPECT_LT(rss_while_blocked, 8 * 1024) << "init RSS " << rss_while_blocked << " KiB while the reader was slow";
  EXPECT_LT(rss_after, 8 * 1024) << "init RSS " << rss_after << " KiB after 50 MiB of output";
}

TEST_F(InitTest, OutputLimitForwardsOneByteMoreAndDropsTheRest) {
  // 20 MiB on stdout, 3 bytes on stderr: stdout stops at limit + 1, the command still runs to
  // its end (init drains its pipe), stderr under the limit arrives whole.
  json request = Exec({"sh", "-c", "head -c 20971520 /dev/zero | tr '\\0' x; echo err >&2"});
  request["output_limit"] = 1000;
  Outcome outcome = Run(request);
  EXPECT_EQ(outcome.out, std::string(1001, 'x'));
  EXPECT_EQ(outcome.err, "err\n");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);

  request["output_limit"] = 0;
  outcome = Run(request);
  EXPECT_EQ(outcome.out, "x");
  EXPECT_EQ(outcome.err, "e");
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);

  // Exactly the limit: nothing more to say.
  request = Exec({"printf", "abc"});
  request["output_limit"] = 3;
  EXPECT_EQ(Run(request).out, "abc");
}

TEST_F(InitTest, NofileBecomesTheCommandsSoftAndHardDescriptorLimit) {
  json request = Exec({"sh", "-c", "ulimit -Sn; ulimit -Hn; ulimit -n 301 && echo raised"});
  request["nofile"] = 300;
  Outcome outcome = Run(request);
  EXPECT_EQ(outcome.out, "300\n300\n");
  // Without it, init's own.
  struct rlimit own {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &own), 0);
  EXPECT_EQ(Run(Exec({"sh", "-c", "ulimit -Hn"})).out, std::to_string(own.rlim_max) + "\n");
  for (json bad : {json(0), json(-1), json("300")}) {
    request["nofile"] = bad;
    Outcome refused = Run(request);
    ASSERT_TRUE(refused.error) << bad;
    EXPECT_EQ((*refused.error)["code"], "invalid_argument") << bad;
  }
}

// Under gVisor the Sentry's host descriptors are the whole sandbox's: a command that holds
// them all leaves init none to accept with, and frees them without any connection of init's
// ending. Init must notice by itself (here: its own limit lowered, then raised from outside).
TEST_F(InitTest, OutOfDescriptorsInitAcceptsAgainOnceSomeAreFree) {
  const pid_t pid = init_.pid();
  struct rlimit own {};
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, nullptr, &own), 0);
  const struct rlimit full = {0, own.rlim_max};  // no new descriptor at all
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, &full, nullptr), 0);

  Client refused(socket_path_);  // accepted by the kernel; init cannot take it yet
  ASSERT_TRUE(refused.connected());
  SendExec(refused, Exec({"echo", "late"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, &own, nullptr), 0);

  Outcome outcome = ReadUntilEnd(refused, std::chrono::seconds(5));
  ASSERT_TRUE(outcome.exit) << "init never accepted again";
  EXPECT_EQ(outcome.out, "late\n");
  EXPECT_EQ(Run(Exec({"echo", "again"})).out, "again\n");
}

TEST_F(InitTest, DescendantHoldingStdoutDoesNotDelayExit) {
  auto begin = Clock::now();
  Outcome outcome = Run(Exec({"sh", "-c", "sleep 1000 & echo $!"}));
  auto elapsed = Clock::now() - begin;
  pid_t sleeper = std::atoi(outcome.out.c_str());
  ASSERT_GT(sleeper, 0) << outcome.out;
  EXPECT_FALSE(ProcessGone(sleeper)) << "the descendant should keep running after kExit";
  ::kill(sleeper, SIGKILL);
  EXPECT_TRUE(WaitUntilGone(sleeper));
  ASSERT_TRUE(outcome.exit);
  EXPECT_EQ((*outcome.exit)["exit_code"], 0);
  EXPECT_LT(elapsed, std::chrono::seconds(1));
}

TEST_F(InitTest, OrphansAreReparentedToInitAndReaped) {
  // The subshell exits at once, so its sleep is orphaned: init (a subreaper here, PID 1 in a
  // sandbox) must adopt it and reap it, leaving no zombie.
  Outcome outcome = Run(Exec({"sh", "-c", "(sleep 0.3 >/dev/null 2>&1 & echo $!)"}));
  ASSERT_TRUE(outcome.exit);
  pid_t orphan = std::stoi(outcome.out);
  EXPECT_EQ(ParentOf(orphan), init_.pid());
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (::kill(orphan, 0) == 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(::kill(orphan, 0), -1) << "the orphan was not reaped (still a zombie?)";
}

TEST_F(InitTest, MalformedFrameGetsErrorAndInitKeepsServing) {
  {
    Client client(socket_path_);
    client.SendRaw(std::string("\0\0\0\0\1", 5));  // length 0 is invalid
    Outcome outcome = ReadUntilEnd(client);
    ASSERT_TRUE(outcome.error);
    EXPECT_EQ((*outcome.error)["code"], "invalid_argument");
    EXPECT_TRUE(outcome.closed_after_last_frame);
  }
  {
    Client client(socket_path_);
    client.Send(ctl::kExec, "{\"argv\": [");
    Outcome outcome = ReadUntilEnd(client);
    ASSERT_TRUE(outcome.error);
    EXPECT_EQ((*outcome.error)["code"], "invalid_argument");
  }
  {
    Client client(socket_path_);
    client.Send(ctl::kExec, R"({"argv": "not an array"})");
    Outcome outcome = ReadUntilEnd(client);
    ASSERT_TRUE(outcome.error);
    EXPECT_EQ((*outcome.error)["code"], "invalid_argument");
  }
  Client client(socket_path_);
  client.Send(ctl::kPing);
  auto pong = client.Read();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->type, ctl::kPong);
  EXPECT_EQ(::kill(init_.pid(), 0), 0);
}

// Each is refused before init touches the filesystem (no sudo socket is made on the host).
TEST_F(InitTest, MalformedSudoUsersAreRefusedAndInitKeepsServing) {
  std::string many = "[";
  for (size_t i = 0; i <= ctl::kMaxSudoUsers; ++i) many += (i ? "," : "") + ("\"u" + std::to_string(i) + "\"");
  many += "]";
  const std::vector<std::string> payloads = {
      "", "[]", R"({"users": "user"})", R"({"users": [1]})", R"({"users": [""]})", R"({"users": ["a:b"]})",
      R"({"users": ["../x"]})", R"({"users": ["a\u0000"]})", R"({"users": [")" + std::string(300, 'u') + R"("]})",
      R"({"users": )" + many + "}", R"({"no_users": []})"};
  for (const std::string& payload : payloads) {
    Client client(socket_path_);
    client.Send(ctl::kSudoUsers, payload);
    Outcome outcome = ReadUntilEnd(client);
    ASSERT_TRUE(outcome.error) << payload;
    EXPECT_EQ((*outcome.error)["code"], "invalid_argument") << payload;
    // The op is known: refused by its parser, not as an unknown first frame.
    EXPECT_EQ((*outcome.error)["message"].get<std::string>().find("first frame"), std::string::npos) << payload;
  }
  Client client(socket_path_);
  client.Send(ctl::kPing);
  auto pong = client.Read();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->type, ctl::kPong);
}

TEST_F(InitTest, PingIsAnsweredOnTheSameConnection) {
  Client client(socket_path_);
  for (int i = 0; i < 3; ++i) {
    client.Send(ctl::kPing);
    auto pong = client.Read();
    ASSERT_TRUE(pong);
    EXPECT_EQ(pong->type, ctl::kPong);
    EXPECT_EQ(pong->payload, "");
  }
}

TEST_F(InitTest, SigtermKillsCommandsAndExitsZero) {
  Client client(socket_path_);
  SendExec(client, Exec({"sleep", "1000"}));
  auto started = client.Read();
  ASSERT_TRUE(started && started->type == ctl::kStarted);
  pid_t pid = json::parse(started->payload)["pid"].get<pid_t>();
  int status = init_.Stop();
  ASSERT_NE(status, -1) << "init could not be signalled or waited for";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(WaitUntilGone(pid));
}

}  // namespace
}  // namespace bulkhead
