// The command line of the file and process commands: cp, ls ID, watch, shell, exec -d,
// ps, logs, kill; and the small parsers they rely on.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/terminal_attach.h"
#include "client/exec_stream.h"

namespace bulkhead::cli {
namespace {

class CliWorkspaceCommandLine : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"BULKHEAD_URL", "BULKHEAD_STATE", "BULKHEAD_LISTEN", "BULKHEAD_API_KEY"}) {
      unsetenv(name);
    }
    DefineCommandLine(app_, line_);
  }

  // Parses `args` (without the program name); returns 0 on success or 2 on a usage error.
  int Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "bulkhead");
    std::vector<const char*> argv;
    for (const auto& arg : args) argv.push_back(arg.c_str());
    try {
      app_.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& error) {
      return error.get_exit_code() == 0 ? 0 : 2;
    }
    return 0;
  }

  CLI::App app_{"bulkhead", "bulkhead"};
  CommandLine line_;
};

TEST_F(CliWorkspaceCommandLine, CopyTakesASourceAndADestination) {
  ASSERT_EQ(Parse({"cp", "./dir", "sb-1:/workspace/"}), 0);
  EXPECT_EQ(line_.command, Command::kCopy);
  EXPECT_EQ(line_.copy_source, "./dir");
  EXPECT_EQ(line_.copy_destination, "sb-1:/workspace/");
}

TEST_F(CliWorkspaceCommandLine, CopyWithOneArgumentIsAUsageError) { EXPECT_EQ(Parse({"cp", "sb-1:/a"}), 2); }

TEST_F(CliWorkspaceCommandLine, LsWithAnIdListsFiles) {
  ASSERT_EQ(Parse({"ls", "sb-1", "/workspace", "-d", "3", "--json"}), 0);
  EXPECT_EQ(line_.command, Command::kList);
  EXPECT_EQ(line_.sandbox_id, "sb-1");
  EXPECT_EQ(line_.path, "/workspace");
  EXPECT_EQ(line_.depth, 3);
  EXPECT_TRUE(line_.json);
}

TEST_F(CliWorkspaceCommandLine, LsDepthIsBounded) { EXPECT_EQ(Parse({"ls", "sb-1", "-d", "33"}), 2); }

TEST_F(CliWorkspaceCommandLine, WatchTakesAPathAndNoRecursive) {
  ASSERT_EQ(Parse({"watch", "sb-1", "src", "--no-recursive", "--json"}), 0);
  EXPECT_EQ(line_.command, Command::kWatch);
  EXPECT_EQ(line_.path, "src");
  EXPECT_TRUE(line_.no_recursive);
  EXPECT_TRUE(line_.json);
}

TEST_F(CliWorkspaceCommandLine, ShellTakesACommandLineAndExecFlags) {
  ASSERT_EQ(Parse({"shell", "sb-1", "--cmd", "python3 -q", "--cwd", "/tmp", "--user", "nobody", "-e", "A=1"}), 0);
  EXPECT_EQ(line_.command, Command::kShell);
  EXPECT_EQ(line_.shell_command, "python3 -q");
  EXPECT_EQ(line_.exec.cwd, "/tmp");
  EXPECT_EQ(line_.exec.user, "nobody");
  EXPECT_EQ(line_.exec.env, std::vector<std::string>{"A=1"});
}

TEST_F(CliWorkspaceCommandLine, ExecDetachTakesATag) {
  ASSERT_EQ(Parse({"exec", "-d", "--tag", "web", "sb-1", "--", "python3", "-m", "http.server", "8000"}), 0);
  EXPECT_EQ(line_.command, Command::kExec);
  EXPECT_TRUE(line_.detach);
  EXPECT_EQ(line_.tag, "web");
  EXPECT_EQ(line_.exec.argv, (std::vector<std::string>{"python3", "-m", "http.server", "8000"}));
}

TEST_F(CliWorkspaceCommandLine, ProcessCommands) {
  ASSERT_EQ(Parse({"logs", "-f", "sb-1", "web", "--offset", "100"}), 0);
  EXPECT_EQ(line_.command, Command::kLogs);
  EXPECT_EQ(line_.process, "web");
  EXPECT_TRUE(line_.follow);
  EXPECT_EQ(line_.offset, 100);

  CLI::App kill_app{"bulkhead", "bulkhead"};
  CommandLine kill_line;
  DefineCommandLine(kill_app, kill_line);
  const char* kill_argv[] = {"bulkhead", "kill", "sb-1", "42"};
  kill_app.parse(4, kill_argv);
  EXPECT_EQ(kill_line.command, Command::kKill);
  EXPECT_EQ(kill_line.process, "42");
  EXPECT_EQ(kill_line.signal, "TERM");

  CLI::App ps_app{"bulkhead", "bulkhead"};
  CommandLine ps_line;
  DefineCommandLine(ps_app, ps_line);
  const char* ps_argv[] = {"bulkhead", "ps", "sb-1", "--json"};
  ps_app.parse(4, ps_argv);
  EXPECT_EQ(ps_line.command, Command::kProcessList);
  EXPECT_TRUE(ps_line.json);
}

TEST_F(CliWorkspaceCommandLine, LogsNeedsAProcess) { EXPECT_EQ(Parse({"logs", "sb-1"}), 2); }

TEST(CliSignals, ParsesNamesAndNumbersAsPeopleWriteThem) {
  EXPECT_EQ(ParseSignal("TERM"), SIGTERM);
  EXPECT_EQ(ParseSignal("SIGKILL"), SIGKILL);
  EXPECT_EQ(ParseSignal("sigint"), SIGINT);
  EXPECT_EQ(ParseSignal("hup"), SIGHUP);
  EXPECT_EQ(ParseSignal("9"), 9);
  EXPECT_EQ(ParseSignal("64"), 64);
  EXPECT_EQ(ParseSignal("0"), std::nullopt);
  EXPECT_EQ(ParseSignal("65"), std::nullopt);
  EXPECT_EQ(ParseSignal("999"), std::nullopt);
  EXPECT_EQ(ParseSignal(""), std::nullopt);
  EXPECT_EQ(ParseSignal("SIG"), std::nullopt);
  EXPECT_EQ(ParseSignal("NOPE"), std::nullopt);
  EXPECT_EQ(ParseSignal("-9"), std::nullopt);
}

TEST(CliAttachMessages, ControlFramesMatchTheApi) {
  using nlohmann::json;
  EXPECT_EQ(json::parse(ResizeMessage(100, 30)), json({{"type", "resize"}, {"cols", 100}, {"rows", 30}}));
  EXPECT_EQ(json::parse(SignalMessage("SIGHUP")), json({{"type", "signal"}, {"signal", "SIGHUP"}}));
  EXPECT_EQ(json::parse(StdinCloseMessage()), json({{"type", "stdin_close"}}));
}

}  // namespace
}  // namespace bulkhead::cli
