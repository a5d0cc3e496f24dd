// The pure parts of envd's process service: the events it sends (proto3 JSON as the e2b
// SDKs read it) and the requests it parses (selectors, inputs, signals, StartRequest).
#include <gtest/gtest.h>

#include <string>

#include "e2b/process_events.h"

namespace bulkhead::e2b {
namespace {

using nlohmann::json;

TEST(E2bProcessEvents, StartDataKeepalive) {
  EXPECT_EQ(StartEvent(42), json::parse(R"({"event":{"start":{"pid":42}}})"));
  EXPECT_EQ(DataEvent("stdout", "hi\n"), json::parse(R"({"event":{"data":{"stdout":"aGkK"}}})"));
  EXPECT_EQ(DataEvent("pty", std::string("\0\xff", 2)), json::parse(R"({"event":{"data":{"pty":"AP8="}}})"));
  EXPECT_EQ(KeepaliveEvent(), json::parse(R"({"event":{"keepalive":{}}})"));
}

TEST(E2bProcessEvents, EndOfAZeroExitOmitsExitCodeAndError) {
  EXPECT_EQ(EndEvent(ctl::ReadExit(json{{"exit_code", 0}, {"signal", nullptr}}.dump())),
            json::parse(R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})"));
}

TEST(E2bProcessEvents, EndOfANonZeroExitCarriesCodeAndError) {
  EXPECT_EQ(EndEvent(ctl::ReadExit(json{{"exit_code", 3}, {"signal", nullptr}}.dump())),
            json::parse(R"({"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}})"));
}

TEST(E2bProcessEvents, EndOfASignalIsGoShaped) {
  EXPECT_EQ(EndEvent(ctl::ReadExit(json{{"exit_code", nullptr}, {"signal", 9}, {"timed_out", true}}.dump())),
            json::parse(R"({"event":{"end":{"exitCode":-1,"exited":false,"status":"signal: killed","error":"signal: killed"}}})"));
  EXPECT_EQ(EndEvent(ctl::ReadExit(json{{"signal", 15}}.dump()))["event"]["end"]["status"], "signal: terminated");
  EXPECT_EQ(GoSignalText(2), "interrupt");
  EXPECT_EQ(GoSignalText(40), "signal 40");
}

TEST(E2bProcessEvents, EndOfAMalformedExitStillEnds) {
  const json end = EndEvent(ctl::ReadExit(json("garbage").dump()))["event"]["end"];
  EXPECT_EQ(end["status"], "exit status -1");
  EXPECT_EQ(end["exitCode"], -1);
}

TEST(E2bProcessSelector, PidAsNumberOrStringAndTag) {
  Result<ProcessSelector> by_pid = ParseSelector(json::parse(R"({"process":{"pid":12}})"));
  ASSERT_TRUE(by_pid.ok());
  EXPECT_EQ(by_pid->pid, 12);
  Result<ProcessSelector> by_text = ParseSelector(json::parse(R"({"process":{"pid":"13"}})"));
  ASSERT_TRUE(by_text.ok());
  EXPECT_EQ(by_text->pid, 13);
  Result<ProcessSelector> by_tag = ParseSelector(json::parse(R"({"process":{"tag":"dev"}})"));
  ASSERT_TRUE(by_tag.ok());
  EXPECT_EQ(by_tag->pid, 0);
  EXPECT_EQ(by_tag->tag, "dev");
  EXPECT_EQ(by_tag->Describe(), "process with tag dev");
}

TEST(E2bProcessSelector, RejectsWhatSelectsNothing) {
  for (const char* bad : {R"({})", R"({"process":null})", R"({"process":5})", R"({"process":{}})",
                          R"({"process":{"pid":0}})", R"({"process":{"pid":-1}})", R"({"process":{"pid":"x"}})",
                          R"({"process":{"pid":99999999999}})", R"({"process":{"tag":""}})",
                          R"({"process":{"tag":7}})"}) {
    Result<ProcessSelector> parsed = ParseSelector(json::parse(bad));
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(ToRpcError(parsed.error()).code, "invalid_argument") << bad;
  }
}

TEST(E2bProcessSelector, NotFoundIsEnvdsMessage) {
  ProcessSelector selector;
  selector.pid = 77;
  const RpcError error = ToRpcError(ProcessNotFoundError(selector));
  EXPECT_EQ(error.code, "not_found");
  EXPECT_EQ(error.message, "process with pid 77 not found");
}

TEST(E2bProcessInput, DecodesStdinOrPty) {
  Result<ProcessInput> in = ParseProcessInput(json::parse(R"({"stdin":"aGkK"})"));
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->pty);
  EXPECT_EQ(in->bytes, "hi\n");
  Result<ProcessInput> pty = ParseProcessInput(json::parse(R"({"pty":"eA=="})"));
  ASSERT_TRUE(pty.ok());
  EXPECT_TRUE(pty->pty);
  EXPECT_EQ(pty->bytes, "x");
  for (const char* bad : {R"({})", R"("aGkK")", R"({"stdin":"%%%"})", R"({"stdin":3})"}) {
    EXPECT_FALSE(ParseProcessInput(json::parse(bad)).ok()) << bad;
  }
}

TEST(E2bProcessSignal, OnlyKillAndTerm) {
  EXPECT_EQ(*ParseE2bSignal("SIGNAL_SIGKILL"), 9);
  EXPECT_EQ(*ParseE2bSignal("SIGNAL_SIGTERM"), 15);
  EXPECT_EQ(*ParseE2bSignal(9), 9);
  EXPECT_EQ(*ParseE2bSignal("15"), 15);
  for (const json& other : {json("SIGNAL_UNSPECIFIED"), json(0), json(2), json(nullptr)}) {
    Result<int> parsed = ParseE2bSignal(other);
    ASSERT_FALSE(parsed.ok()) << other;
    EXPECT_EQ(ToRpcError(parsed.error()).code, "unimplemented") << other;
  }
  Result<int> nonsense = ParseE2bSignal("SIGHUP");
  ASSERT_FALSE(nonsense.ok());
  EXPECT_EQ(ToRpcError(nonsense.error()).code, "invalid_argument");
  EXPECT_EQ(ToRpcError(ParseE2bSignal(json::object()).error()).code, "invalid_argument");
}

TEST(E2bProcessPty, SizeWithDefaultsAndLimits) {
  Result<api::PtySize> size = ParsePty(json::parse(R"({"size":{"cols":100,"rows":30}})"));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->cols, 100);
  EXPECT_EQ(size->rows, 30);
  EXPECT_EQ(ParsePty(json::object())->cols, 80);
  EXPECT_FALSE(ParsePty(json::parse(R"({"size":{"cols":0,"rows":30}})")).ok());
  EXPECT_FALSE(ParsePty(json::parse(R"({"size":{"cols":100000,"rows":30}})")).ok());
  EXPECT_FALSE(ParsePty(json::parse(R"({"size":"big"})")).ok());
}

TEST(E2bProcessStart, CommandLineEnvsAndTheHomeAsCwd) {
  Result<StartSpec> spec = ParseStartRequest(
      json::parse(R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"}},"stdin":false})"),
      "user", "/home/user");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->options.request.argv, (std::vector<std::string>{"/bin/bash", "-l", "-c", "echo hi"}));
  EXPECT_EQ(spec->options.request.env.at("A"), "1");
  EXPECT_EQ(spec->options.request.user, "user");
  EXPECT_EQ(spec->options.request.cwd, "/home/user");
  EXPECT_EQ(spec->cwd, "/home/user");
  EXPECT_FALSE(spec->stdin);
  EXPECT_FALSE(spec->options.pty);
  EXPECT_EQ(spec->options.request.timeout_s, 0);
}

TEST(E2bProcessStart, RelativeAndTildeCwdTakeTheHome) {
  auto cwd_of = [](const char* cwd, const std::string& home) {
    json request = {{"process", {{"cmd", "pwd"}, {"cwd", cwd}}}};
    Result<StartSpec> spec = ParseStartRequest(request, "someone", home);
    return spec.ok() ? spec->cwd : "error: " + spec.error().message;
  };
  EXPECT_EQ(cwd_of("work", "/home/user"), "/home/user/work");
  EXPECT_EQ(cwd_of("~/x", "/root"), "/root/x");
  EXPECT_EQ(cwd_of("/tmp", "/root"), "/tmp");
  EXPECT_EQ(cwd_of("", "/root"), "/root");
  EXPECT_EQ(cwd_of("a/../b", "/srv/app"), "/srv/app/b");  // a home outside /home, as passwd says
  EXPECT_TRUE(cwd_of("~other/x", "/root").starts_with("error: "));
}

TEST(E2bProcessStart, PtyTagAndStdinDefault) {
  Result<StartSpec> spec = ParseStartRequest(
      json::parse(R"({"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":90,"rows":20}},"tag":"term"})"),
      "root", "/root");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_TRUE(spec->options.pty);
  EXPECT_EQ(spec->options.pty->cols, 90);
  EXPECT_EQ(spec->options.tag, "term");
  EXPECT_TRUE(spec->stdin);
}

TEST(E2bProcessStart, RejectsMalformedRequests) {
  for (const char* bad : {R"({})", R"({"process":{}})", R"({"process":{"cmd":""}})", R"({"process":{"cmd":5}})",
                          R"({"process":{"cmd":"x","args":"y"}})", R"({"process":{"cmd":"x","args":[1]}})",
                          R"({"process":{"cmd":"x","envs":{"A":1}}})", R"({"process":{"cmd":"x","cwd":3}})",
                          R"({"process":{"cmd":"x"},"stdin":"yes"})", R"({"process":{"cmd":"x"},"pty":{"size":{"cols":-1}}})",
                          R"({"process":{"cmd":"x"},"tag":"123"})"}) {
    Result<StartSpec> spec = ParseStartRequest(json::parse(bad), "root", "/root");
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(ToRpcError(spec.error()).code, "invalid_argument") << bad;
  }
}

TEST(E2bProcessStart, CwdErrorsAreEnvds) {
  const RpcError missing =
      StartError(MakeError(ErrorCode::kNotFound, "cwd /nope: No such file or directory"), "/nope", "root");
  EXPECT_EQ(missing.code, "invalid_argument");
  EXPECT_EQ(missing.message, "cwd '/nope' does not exist");
  EXPECT_EQ(StartError(MakeError(ErrorCode::kUnavailable, "init gone"), "/", "root").code, "unavailable");
  const RpcError user =
      StartError(MakeError(ErrorCode::kNotFound, "user ghost not found in /etc/passwd"), "/home/ghost", "ghost");
  EXPECT_EQ(user.code, "unauthenticated");
  EXPECT_EQ(user.message, "invalid username: 'ghost'");
}

}  // namespace
}  // namespace bulkhead::e2b
