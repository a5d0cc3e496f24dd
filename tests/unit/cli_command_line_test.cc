#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/command_line.h"

namespace bulkhead::cli {
namespace {

// Clears the environment variables the command line reads, for the test's duration.
class CliCommandLine : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"BULKHEAD_URL", "BULKHEAD_STATE", "BULKHEAD_LISTEN", "BULKHEAD_API_KEY"}) {
      unsetenv(name);
    }
  }
  void TearDown() override { SetUp(); }

  // Parses `args` (without the program name); returns 0 on success or the exit code.
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
  void Define() { DefineCommandLine(app_, line_); }
};

TEST_F(CliCommandLine, RunTakesSandboxFlagsAndTheCommandAfterDoubleDash) {
  Define();
  ASSERT_EQ(Parse({"run", "--image", "py", "--memory-mb", "512", "--cpus", "0.5", "--disk-mb", "100", "--pids",
                   "64", "--timeout", "10", "-e", "A=1", "--env", "B=2", "--workdir", "/w", "--user", "u", "-i",
                   "--", "sh", "-c", "echo a; echo b"}),
            0);
  EXPECT_EQ(line_.command, Command::kRun);
  EXPECT_EQ(line_.sandbox.image, "py");
  EXPECT_EQ(line_.sandbox.memory_mb, 512);
  EXPECT_EQ(line_.sandbox.cpus, 0.5);
  EXPECT_EQ(line_.sandbox.disk_mb, 100);
  EXPECT_EQ(line_.sandbox.pids, 64);
  EXPECT_EQ(line_.sandbox.timeout_s, 10);
  EXPECT_EQ(line_.sandbox.env, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(line_.sandbox.workdir, "/w");
  EXPECT_EQ(line_.sandbox.user, "u");
  EXPECT_TRUE(line_.exec.forward_stdin);
  EXPECT_EQ(line_.exec.argv, (std::vector<std::string>{"sh", "-c", "echo a; echo b"}));
}

TEST_F(CliCommandLine, RunKeepsAOneWordCommandWithSpacesAsOneArgument) {
  Define();
  ASSERT_EQ(Parse({"run", "echo hello world"}), 0);
  EXPECT_EQ(line_.exec.argv, std::vector<std::string>{"echo hello world"});
  EXPECT_FALSE(line_.sandbox.timeout_s.has_value());
  EXPECT_FALSE(line_.exec.forward_stdin);
}

TEST_F(CliCommandLine, RunPassesOptionLikeWordsAfterDoubleDashToTheCommand) {
  Define();
  ASSERT_EQ(Parse({"run", "--", "ls", "-la", "--image", "x"}), 0);
  EXPECT_EQ(line_.exec.argv, (std::vector<std::string>{"ls", "-la", "--image", "x"}));
  EXPECT_FALSE(line_.sandbox.image.has_value());
}

TEST_F(CliCommandLine, RunWithoutACommandRunsWhatTheImageSays) {
  Define();
  ASSERT_EQ(Parse({"run", "--image", "x"}), 0);
  EXPECT_TRUE(line_.exec.argv.empty()) << "the image's entrypoint and cmd, read when it runs";
}

TEST_F(CliCommandLine, ImagePullTakesAReferenceAndAPlatform) {
  Define();
  ASSERT_EQ(Parse({"image", "pull", "registry.example/team/py:3.12", "--platform", "linux/arm64"}), 0);
  EXPECT_EQ(line_.command, Command::kImagePull);
  EXPECT_EQ(line_.image_name, "registry.example/team/py:3.12");
  EXPECT_EQ(line_.platform, "linux/arm64");
  EXPECT_EQ(Parse({"image", "pull"}), 2) << "the reference is required";
}

TEST_F(CliCommandLine, ExecTakesItsFlagsAfterTheId) {
  Define();
  ASSERT_EQ(Parse({"exec", "sb-1", "-e", "K=V", "--cwd", "/tmp", "--user", "nobody", "--timeout", "5", "-i", "--",
                   "python3", "-c", "print(1)"}),
            0);
  EXPECT_EQ(line_.command, Command::kExec);
  EXPECT_EQ(line_.sandbox_id, "sb-1");
  EXPECT_EQ(line_.exec.env, std::vector<std::string>{"K=V"});
  EXPECT_EQ(line_.exec.cwd, "/tmp");
  EXPECT_EQ(line_.exec.user, "nobody");
  EXPECT_EQ(line_.exec.timeout_s, 5);
  EXPECT_TRUE(line_.exec.forward_stdin);
  EXPECT_EQ(line_.exec.argv, (std::vector<std::string>{"python3", "-c", "print(1)"}));
}

TEST_F(CliCommandLine, GlobalOptionsWorkBeforeAndAfterTheSubcommand) {
  Define();
  ASSERT_EQ(Parse({"--state-dir", "/s", "ls", "--url", "http://127.0.0.1:1", "--state", "running", "--json"}), 0);
  EXPECT_EQ(line_.command, Command::kList);
  EXPECT_EQ(line_.state_dir, "/s");
  EXPECT_EQ(line_.url, "http://127.0.0.1:1");
  EXPECT_EQ(line_.state_filter, "running");
  EXPECT_TRUE(line_.json);
}

TEST_F(CliCommandLine, EnvironmentGivesDefaultsThatFlagsOverride) {
  setenv("BULKHEAD_URL", "unix:///env.sock", 1);
  setenv("BULKHEAD_STATE", "/env-state", 1);
  Define();
  ASSERT_EQ(Parse({"inspect", "abc"}), 0);
  EXPECT_EQ(line_.url, "unix:///env.sock");
  EXPECT_EQ(line_.state_dir, "/env-state");
  EXPECT_EQ(line_.sandbox_id, "abc");

  CLI::App other{"bulkhead", "bulkhead"};
  CommandLine overridden;
  DefineCommandLine(other, overridden);
  const char* argv[] = {"bulkhead", "--url", "http://127.0.0.1:9", "version"};
  other.parse(4, argv);
  EXPECT_EQ(overridden.url, "http://127.0.0.1:9");
  EXPECT_EQ(overridden.command, Command::kVersion);
}

TEST_F(CliCommandLine, WarmPoolsArePerRuntimeOrForAll) {
  Define();
  ASSERT_EQ(Parse({"serve", "--warm-pool", "3", "--warm-pool", "gvisor=1", "--default-runtime", "gvisor",
                   "--runsc", "/opt/runsc", "--warm-pool", "registry.test/py:3.12=2", "--warm-pool", "tools@native=1"}),
            0);
  core::DaemonConfig config = DaemonConfigFromCommandLine(line_);
  EXPECT_EQ(config.WarmPool("native"), 3);
  EXPECT_EQ(config.WarmPool("gvisor"), 1);
  EXPECT_EQ(config.default_runtime, "gvisor");
  EXPECT_EQ(config.runsc, "/opt/runsc");
  EXPECT_TRUE(config.WarmPoolAtStart("gvisor"));
  EXPECT_FALSE(config.WarmPoolAtStart("native"));  // fills from its first create
  ASSERT_EQ(config.image_warm_pools.size(), 2u);
  EXPECT_EQ(config.image_warm_pools[0].image, "registry.test/py:3.12");
  EXPECT_EQ(config.image_warm_pools[0].runtime, "");
  EXPECT_EQ(config.image_warm_pools[0].count, 2);
  EXPECT_EQ(config.image_warm_pools[1].image, "tools");
  EXPECT_EQ(config.image_warm_pools[1].runtime, "native");

  auto entry = [](const char* text) {
    auto e = ParseWarmPool(text);
    return e.ok() ? std::tuple(e->runtime, e->image, e->count) : std::tuple(std::string("!"), std::string(), -1);
  };
  EXPECT_EQ(entry("0"), std::tuple(std::string(), std::string(), 0));
  EXPECT_EQ(entry("microvm=2"), std::tuple(std::string("microvm"), std::string(), 2));
  // Another image's pool: on the default runtime, or one named after '@'.
  EXPECT_EQ(entry("kvm=2"), std::tuple(std::string(), std::string("kvm"), 2));
  EXPECT_EQ(entry("registry.test:5000/team/py:3.12=3"),
            std::tuple(std::string(), std::string("registry.test:5000/team/py:3.12"), 3));
  EXPECT_EQ(entry("py:3.12@gvisor=1"), std::tuple(std::string("gvisor"), std::string("py:3.12"), 1));
  const std::string pinned = "registry.test/py@sha256:" + std::string(64, 'a');
  EXPECT_EQ(entry((pinned + "@microvm=1").c_str()), std::tuple(std::string("microvm"), pinned, 1));
  for (const char* bad : {"", "-1", "x", "gvisor=", "=2", "gvisor=1.5", "9999999", "Bad Name=1", "../x=1",
                          "py@kvm=1", "REG.test/Py=1", "py:3.12@=1"})
    EXPECT_FALSE(ParseWarmPool(bad).ok()) << bad;
  auto refused = [](const char* flag, const char* value) {
    CLI::App app{"bulkhead", "bulkhead"};
    CommandLine line;
    DefineCommandLine(app, line);
    const char* argv[] = {"bulkhead", "serve", flag, value};
    try {
      app.parse(4, argv);
    } catch (const CLI::ParseError&) {
      return true;
    }
    return false;
  };
  EXPECT_TRUE(refused("--warm-pool", "lots"));
  EXPECT_TRUE(refused("--default-runtime", "kvm"));
}

TEST_F(CliCommandLine, ServeConfigComesFromFlagsOverEnvironment) {
  setenv("BULKHEAD_LISTEN", "127.0.0.1:9999", 1);
  setenv("BULKHEAD_STATE", "/env-state", 1);
  setenv("BULKHEAD_API_KEY", "secret", 1);
  Define();
  ASSERT_EQ(Parse({"serve", "--warm-pool", "0", "--io-threads", "8", "--blocking-threads", "6", "--output-rate", "0",
                   "--audit-keep-days", "90"}), 0);
  EXPECT_EQ(line_.command, Command::kServe);
  core::DaemonConfig config = DaemonConfigFromCommandLine(line_);
  EXPECT_EQ(config.listen, "127.0.0.1:9999");
  EXPECT_EQ(config.state_dir, "/env-state");
  EXPECT_EQ(config.api_key, "secret");
  EXPECT_EQ(config.warm_pool, 0);
  EXPECT_EQ(config.WarmPool("gvisor"), 0);  // a bare N is every runtime's
  EXPECT_EQ(config.io_threads, 8);
  EXPECT_EQ(config.blocking_threads, 6);
  EXPECT_EQ(config.output_rate_mib, 0);  // no cap
  EXPECT_EQ(config.audit_keep_days, 90);

  CLI::App other{"bulkhead", "bulkhead"};
  CommandLine flags;
  DefineCommandLine(other, flags);
  const char* argv[] = {"bulkhead", "serve", "--listen", "", "--state-dir", "/flag-state"};
  other.parse(6, argv);
  core::DaemonConfig from_flags = DaemonConfigFromCommandLine(flags);
  EXPECT_EQ(from_flags.listen, "");  // unix socket only
  EXPECT_EQ(from_flags.state_dir, "/flag-state");
  EXPECT_EQ(from_flags.warm_pool, core::DaemonConfig{}.warm_pool);
  EXPECT_EQ(from_flags.WarmPool("gvisor"), 2);
  EXPECT_EQ(from_flags.default_runtime, "native");
  EXPECT_EQ(from_flags.io_threads, core::DaemonConfig{}.io_threads);
  EXPECT_EQ(from_flags.blocking_threads, core::DaemonConfig{}.blocking_threads);
  EXPECT_EQ(from_flags.output_rate_mib, core::DaemonConfig{}.output_rate_mib);
  EXPECT_EQ(from_flags.audit_keep_days, 0);  // every record kept

  // Out of range: refused by the parser.
  CLI::App bad{"bulkhead", "bulkhead"};
  CommandLine bad_line;
  DefineCommandLine(bad, bad_line);
  const char* bad_argv[] = {"bulkhead", "serve", "--io-threads", "0"};
  EXPECT_THROW(bad.parse(4, bad_argv), CLI::ValidationError);
  CLI::App bad_rate{"bulkhead", "bulkhead"};
  CommandLine bad_rate_line;
  DefineCommandLine(bad_rate, bad_rate_line);
  const char* bad_rate_argv[] = {"bulkhead", "serve", "--output-rate", "-1"};
  EXPECT_THROW(bad_rate.parse(4, bad_rate_argv), CLI::ValidationError);
  CLI::App bad_keep{"bulkhead", "bulkhead"};
  CommandLine bad_keep_line;
  DefineCommandLine(bad_keep, bad_keep_line);
  const char* bad_keep_argv[] = {"bulkhead", "serve", "--audit-keep-days", "-3"};
  EXPECT_THROW(bad_keep.parse(4, bad_keep_argv), CLI::ValidationError);
}

TEST_F(CliCommandLine, AnEmptyListenVariableMeansUnixSocketOnly) {
  setenv("BULKHEAD_LISTEN", "", 1);
  Define();
  ASSERT_EQ(Parse({"serve"}), 0);
  EXPECT_EQ(DaemonConfigFromCommandLine(line_).listen, "");
}

TEST_F(CliCommandLine, ServeDefaultsMatchTheDaemonConfig) {
  Define();
  ASSERT_EQ(Parse({"serve"}), 0);
  core::DaemonConfig config = DaemonConfigFromCommandLine(line_);
  EXPECT_EQ(config.listen, "127.0.0.1:7420");
  EXPECT_EQ(config.state_dir, "/var/lib/bulkhead");
  EXPECT_EQ(config.api_key, "");
}

TEST_F(CliCommandLine, ParsesTheOtherSubcommands) {
  Define();
  ASSERT_EQ(Parse({"create", "--image", "host", "--metadata", "a=b", "--metadata", "c=d", "--json"}), 0);
  EXPECT_EQ(line_.command, Command::kCreate);
  EXPECT_EQ(line_.sandbox.metadata, (std::vector<std::string>{"a=b", "c=d"}));
  EXPECT_TRUE(line_.json);

  CLI::App rm_app{"bulkhead", "bulkhead"};
  CommandLine rm_line;
  DefineCommandLine(rm_app, rm_line);
  const char* rm_argv[] = {"bulkhead", "rm", "a", "b", "c"};
  rm_app.parse(5, rm_argv);
  EXPECT_EQ(rm_line.command, Command::kRemove);
  EXPECT_EQ(rm_line.sandbox_ids, (std::vector<std::string>{"a", "b", "c"}));

  for (const char* action : {"pause", "resume", "stop", "start"}) {
    CLI::App lifecycle_app{"bulkhead", "bulkhead"};
    CommandLine lifecycle_line;
    DefineCommandLine(lifecycle_app, lifecycle_line);
    const char* argv[] = {"bulkhead", action, "a", "b"};
    lifecycle_app.parse(4, argv);
    EXPECT_EQ(lifecycle_line.command, Command::kLifecycle) << action;
    EXPECT_EQ(lifecycle_line.lifecycle_action, action);
    EXPECT_EQ(lifecycle_line.sandbox_ids, (std::vector<std::string>{"a", "b"}));
  }

  CLI::App image_app{"bulkhead", "bulkhead"};
  CommandLine image_line;
  DefineCommandLine(image_app, image_line);
  const char* image_argv[] = {"bulkhead", "image", "import", "alpine", "/tmp"};
  image_app.parse(5, image_argv);
  EXPECT_EQ(image_line.command, Command::kImageImport);
  EXPECT_EQ(image_line.image_name, "alpine");
  EXPECT_EQ(image_line.image_path, "/tmp");
}

TEST_F(CliCommandLine, ImageImportOfAMissingPathIsAUsageError) {
  Define();
  EXPECT_EQ(Parse({"image", "import", "x", "/nonexistent/rootfs"}), 2);
}

TEST_F(CliCommandLine, NoSubcommandIsAUsageError) {
  Define();
  EXPECT_EQ(Parse({}), 2);
  EXPECT_EQ(line_.command, Command::kNone);
}

TEST_F(CliCommandLine, ParseKeyValueSplitsAtTheFirstEquals) {
  auto pair = ParseKeyValue("A=b=c", false);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->first, "A");
  EXPECT_EQ(pair->second, "b=c");
  auto empty_value = ParseKeyValue("A=", false);
  ASSERT_TRUE(empty_value.ok());
  EXPECT_EQ(empty_value->second, "");
  EXPECT_FALSE(ParseKeyValue("=v", true).ok());
  EXPECT_FALSE(ParseKeyValue("A", false).ok());
}

TEST_F(CliCommandLine, ParseKeyValueTakesABareKeyFromTheEnvironment) {
  setenv("BULKHEAD_TEST_PASSTHROUGH", "from-env", 1);
  auto present = ParseKeyValue("BULKHEAD_TEST_PASSTHROUGH", true);
  unsetenv("BULKHEAD_TEST_PASSTHROUGH");
  ASSERT_TRUE(present.ok());
  EXPECT_EQ(present->second, "from-env");
  auto absent = ParseKeyValue("BULKHEAD_TEST_PASSTHROUGH", true);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->second.has_value());
}

TEST_F(CliCommandLine, ClientSettingsDefaultToTheStateDirSocketAndKeyFile) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "bulkhead-cli-settings-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "api-key") << "  key-from-file\n";
  CommandLine line;
  line.state_dir = dir.string();
  auto settings = ResolveClientSettings(line);
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->address.kind, ServerAddress::Kind::kUnix);
  EXPECT_EQ(settings->address.socket_path, (dir / "bulkhead.sock").string());
  EXPECT_EQ(settings->api_key, "key-from-file");

  setenv("BULKHEAD_API_KEY", "key-from-env", 1);
  line.url = "http://127.0.0.1:7420";
  auto from_env = ResolveClientSettings(line);
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->api_key, "key-from-env");
  EXPECT_EQ(from_env->address.kind, ServerAddress::Kind::kTcp);

  line.url = "https://x";
  line.ca_cert = "/etc/ca.pem";
  auto tls = ResolveClientSettings(line);
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->address.tls);
  EXPECT_EQ(tls->address.ca_file, "/etc/ca.pem");
  line.url = "ftp://x";
  EXPECT_FALSE(ResolveClientSettings(line).ok());
  std::filesystem::remove_all(dir);
}

TEST_F(CliCommandLine, ClientSettingsWithoutAKeyFileHaveNoKey) {
  CommandLine line;
  line.state_dir = "/nonexistent-bulkhead-state";
  auto settings = ResolveClientSettings(line);
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->api_key, "");
  EXPECT_EQ(settings->api_key_source, "/nonexistent-bulkhead-state/api-key");
}

TEST_F(CliCommandLine, PortForwardTakesTheSandboxPortAndAnOptionalLocalPort) {
  Define();
  ASSERT_EQ(Parse({"port-forward", "sb1", "8000"}), 0);
  EXPECT_EQ(line_.command, Command::kPortForward);
  EXPECT_EQ(line_.sandbox_id, "sb1");
  EXPECT_EQ(line_.port, 8000);
  EXPECT_FALSE(line_.local_port);  // the same port locally
}

TEST_F(CliCommandLine, PortForwardLocalPortZeroMeansAnyAndBadPortsAreUsageErrors) {
  Define();
  ASSERT_EQ(Parse({"port-forward", "sb1", "5432", "0"}), 0);
  EXPECT_EQ(line_.local_port, 0);
  for (std::vector<std::string> args : {std::vector<std::string>{"port-forward", "sb1", "0"},
                                        {"port-forward", "sb1", "65536"},
                                        {"port-forward", "sb1", "http"},
                                        {"port-forward", "sb1", "80", "70000"},
                                        {"port-forward", "sb1"}}) {
    CLI::App app{"bulkhead", "bulkhead"};
    CommandLine line;
    DefineCommandLine(app, line);
    args.insert(args.begin(), "bulkhead");
    std::vector<const char*> argv;
    for (const auto& arg : args) argv.push_back(arg.c_str());
    EXPECT_THROW(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ParseError) << args.back();
  }
}

}  // namespace
}  // namespace bulkhead::cli
