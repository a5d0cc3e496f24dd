// The pure parts of the process routes: request validation, signal names, the output
// cursor's offset arithmetic and the pid-or-tag lookup.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "api/process_output.h"
#include "service/init_process.h"
#include "service/process_request.h"
#include "service/signal_names.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

// ---- Signal names

TEST(SignalNumber, AcceptsNamesWithAndWithoutPrefixInAnyCase) {
  EXPECT_EQ(SignalNumber("SIGTERM"), SIGTERM);
  EXPECT_EQ(SignalNumber("TERM"), SIGTERM);
  EXPECT_EQ(SignalNumber("sigkill"), SIGKILL);
  EXPECT_EQ(SignalNumber("Int"), SIGINT);
  EXPECT_EQ(SignalNumber("SIGWINCH"), SIGWINCH);
  EXPECT_EQ(SignalNumber("CLD"), SIGCHLD);
  EXPECT_EQ(SignalNumber("15"), 15);
  EXPECT_EQ(SignalNumber("SIGRTMIN"), SIGRTMIN);
  EXPECT_EQ(SignalNumber("SIGRTMIN+2"), SIGRTMIN + 2);
  EXPECT_EQ(SignalNumber("RTMAX-1"), SIGRTMAX - 1);
}

TEST(SignalNumber, RejectsUnknownNamesAndNumbersOutOfRange) {
  for (const char* name : {"", "SIG", "TERMX", "SIGFOO", "0", "65", "100", "-1", "SIGRTMIN+99", "RTMAX-99",
                           "SIGTERM ", " 15", "SIGRTMIN+", "1.5"}) {
    EXPECT_FALSE(SignalNumber(name).has_value()) << name;
  }
}

TEST(ParseSignal, TakesNamesAndNumbers) {
  EXPECT_EQ(*ParseSignal(json("SIGHUP"), "signal"), SIGHUP);
  EXPECT_EQ(*ParseSignal(json(9), "signal"), 9);
  EXPECT_EQ(*ParseSignal(json(64), "signal"), 64);
  for (const json& bad : {json(0), json(65), json(-15), json(1e30), json(15.5), json("NOPE"), json(true),
                          json::array(), json(nullptr), json(uint64_t{1} << 63)}) {
    Result<int> parsed = ParseSignal(bad, "signal");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalid) << bad;
    EXPECT_NE(parsed.error().message.find("signal"), std::string::npos) << parsed.error().message;
  }
}

// ---- Starting a process

TEST(ParseProcessOptions, StringCommandRunsInAShellAndTimeoutDefaultsToNone) {
  Result<ProcessOptions> options = ParseProcessOptions({{"cmd", "echo hi"}});
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->request.argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(options->request.timeout_s, 0);
  EXPECT_FALSE(options->tag.has_value());
  EXPECT_FALSE(options->pty.has_value());
}

TEST(ParseProcessOptions, ReadsTagPtyAndCommandFields) {
  const json body = {{"cmd", {"sleep", "10"}}, {"cwd", "/tmp"},  {"env", {{"A", "1"}}}, {"user", "1000"},
                     {"tag", "dev-server"},    {"timeout_s", 30}, {"pty", {{"cols", 120}}}};
  Result<ProcessOptions> options = ParseProcessOptions(body);
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->request.argv, (std::vector<std::string>{"sleep", "10"}));
  EXPECT_EQ(options->request.cwd, "/tmp");
  EXPECT_EQ(options->request.env.at("A"), "1");
  EXPECT_EQ(options->request.user, "1000");
  EXPECT_EQ(options->tag, "dev-server");
  EXPECT_EQ(options->request.timeout_s, 30);
  ASSERT_TRUE(options->pty.has_value());
  EXPECT_EQ(options->pty->cols, 120);
  EXPECT_EQ(options->pty->rows, 24);  // the default for a side not given
}

TEST(ParseProcessOptions, RejectsBadFieldsNamingThem) {
  struct Case {
    json body;
    const char* field;
  };
  for (const Case& c : {Case{json::object(), "cmd"}, Case{{{"cmd", ""}}, "cmd"}, Case{{{"cmd", 5}}, "cmd"},
                        Case{{{"cmd", "x"}, {"cwd", "rel"}}, "cwd"}, Case{{{"cmd", "x"}, {"tag", ""}}, "tag"},
                        Case{{{"cmd", "x"}, {"tag", "123"}}, "tag"}, Case{{{"cmd", "x"}, {"tag", 7}}, "tag"},
                        Case{{{"cmd", "x"}, {"tag", "a\nb"}}, "tag"},
                        Case{{{"cmd", "x"}, {"tag", std::string(129, 'a')}}, "tag"},
                        Case{{{"cmd", "x"}, {"pty", true}}, "pty"},
                        Case{{{"cmd", "x"}, {"pty", {{"cols", 0}}}}, "pty.cols"},
                        Case{{{"cmd", "x"}, {"pty", {{"rows", 10001}}}}, "pty.rows"},
                        Case{{{"cmd", "x"}, {"pty", {{"rows", "24"}}}}, "pty.rows"},
                        Case{{{"cmd", "x"}, {"timeout_s", -1}}, "timeout_s"},
                        Case{{{"cmd", "x"}, {"timeout_s", 1.5}}, "timeout_s"}}) {
    Result<ProcessOptions> options = ParseProcessOptions(c.body);
    ASSERT_FALSE(options.ok()) << c.body;
    EXPECT_EQ(options.error().code, ErrorCode::kInvalid) << c.body;
    EXPECT_NE(options.error().message.find(c.field), std::string::npos) << options.error().message;
  }
}

TEST(IsValidTag, CountsCharactersNotBytes) {
  EXPECT_TRUE(IsValidTag("web"));
  EXPECT_TRUE(IsValidTag("a1"));
  EXPECT_TRUE(IsValidTag(std::string(128, 'x')));
  std::string accents;
  for (int i = 0; i < 128; ++i) accents += "\xc3\xa9";  // é: 2 bytes, 1 character
  EXPECT_TRUE(IsValidTag(accents));
  EXPECT_FALSE(IsValidTag(accents + "x"));
  EXPECT_FALSE(IsValidTag("\xff"));
  EXPECT_FALSE(IsValidTag("0042"));
  EXPECT_FALSE(IsValidTag(std::string("a\0b", 3)));
}

TEST(ParseProcessRef, NumbersArePidsAnythingElseATag) {
  EXPECT_EQ(ParseProcessRef("12")->pid, 12);
  EXPECT_EQ(ParseProcessRef("web")->pid, 0);
  EXPECT_EQ(ParseProcessRef("web")->tag, "web");
  EXPECT_EQ(ParseProcessRef("12a")->tag, "12a");
  EXPECT_FALSE(ParseProcessRef("0"));
  EXPECT_FALSE(ParseProcessRef("2147483648"));
  EXPECT_FALSE(ParseProcessRef("99999999999999999999999"));
  EXPECT_FALSE(ParseProcessRef(""));
}

// ---- Query and bodies

TEST(ParseOutputQuery, OffsetSetsBothStreamsAndSpecificOnesOverride) {
  Result<OutputQuery> query = ParseOutputQuery({{"offset", "10"}, {"stderr_offset", "3"}, {"follow", "true"}});
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->stdout_offset, 10u);
  EXPECT_EQ(query->stderr_offset, 3u);
  EXPECT_TRUE(query->follow);
  Result<OutputQuery> defaults = ParseOutputQuery({{"other", "x"}});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->stdout_offset, 0u);
  EXPECT_FALSE(defaults->follow);
  for (QueryParams bad : {QueryParams{{"offset", "-1"}}, QueryParams{{"offset", ""}}, QueryParams{{"offset", "1x"}},
                          QueryParams{{"stdout_offset", "99999999999999999999"}}, QueryParams{{"follow", "yes"}}}) {
    Result<OutputQuery> parsed = ParseOutputQuery(bad);
    ASSERT_FALSE(parsed.ok()) << bad[0].first << "=" << bad[0].second;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalid);
  }
}

TEST(ParseStdinBody, TakesTextOrBase64) {
  EXPECT_EQ(*ParseStdinBody({{"data", "hi\n"}}), "hi\n");
  EXPECT_EQ(*ParseStdinBody({{"data_b64", "AP8="}}), std::string("\x00\xff", 2));
  EXPECT_EQ(*ParseStdinBody({{"data", ""}}), "");
  for (const json& bad : {json::object(), json{{"data", "a"}, {"data_b64", "YQ=="}}, json{{"data", 1}},
                          json{{"data_b64", "!!"}}}) {
    EXPECT_FALSE(ParseStdinBody(bad).ok()) << bad;
  }
}

TEST(ParseResize, NeedsBothSidesInRange) {
  Result<PtySize> size = ParseResize({{"cols", 100}, {"rows", 30}});
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->cols, 100);
  EXPECT_EQ(size->rows, 30);
  for (const json& bad : {json{{"cols", 100}}, json{{"cols", 0}, {"rows", 1}}, json{{"cols", 1}, {"rows", 10001}},
                          json{{"cols", "80"}, {"rows", 24}}}) {
    EXPECT_FALSE(ParseResize(bad).ok()) << bad;
  }
}

// ---- Output offsets

TEST(ProcessOutputCursor, EachEventCarriesTheEndOffsetOfItsStream) {
  ProcessOutputCursor cursor(0, 0);
  EXPECT_TRUE(cursor.Start(0, 0).empty());
  auto first = cursor.Output(OutputStream::kStdout, "hello ");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], (json{{"type", "stdout"}, {"data", "hello "}, {"offset", 6}}));
  auto err = cursor.Output(OutputStream::kStderr, "oops");
  EXPECT_EQ(err[0]["offset"], 4);
  auto second = cursor.Output(OutputStream::kStdout, "world");
  EXPECT_EQ(second[0]["offset"], 11);
  EXPECT_TRUE(cursor.Finish().empty());
}

TEST(ProcessOutputCursor, ResumingStartsFromTheGivenOffset) {
  ProcessOutputCursor cursor(6, 4);
  EXPECT_TRUE(cursor.Start(6, 4).empty());  // the ring still holds everything asked for
  auto rest = cursor.Output(OutputStream::kStdout, "world");
  EXPECT_EQ(rest[0]["offset"], 11);
}

TEST(ProcessOutputCursor, ReportsWhatTheRingNoLongerHeldAtTheStart) {
  ProcessOutputCursor cursor(0, 5);
  auto gaps = cursor.Start(100, 5);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0], (json{{"type", "gap"}, {"stream", "stdout"}, {"from", 0}, {"to", 100}}));
  EXPECT_EQ(cursor.Output(OutputStream::kStdout, "x")[0]["offset"], 101);
}

TEST(ProcessOutputCursor, AnOffsetBeyondTheEndIsNoGap) {
  ProcessOutputCursor cursor(500, 0);
  EXPECT_TRUE(cursor.Start(20, 0).empty());  // init starts at the end of the output
  EXPECT_EQ(cursor.Output(OutputStream::kStdout, "ab")[0]["offset"], 22);
}

TEST(ProcessOutputCursor, AGapWhileFollowingSkipsAhead) {
  ProcessOutputCursor cursor(0, 0);
  cursor.Start(0, 0);
  cursor.Output(OutputStream::kStdout, "abc");
  auto gaps = cursor.Skip(1000, 0);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0], (json{{"type", "gap"}, {"stream", "stdout"}, {"from", 3}, {"to", 1000}}));
  EXPECT_TRUE(cursor.Skip(1000, 0).empty());  // nothing more was skipped
  EXPECT_EQ(cursor.Output(OutputStream::kStdout, "d")[0]["offset"], 1001);
}

TEST(ProcessOutputCursor, ASplitCharacterIsHeldBackAndNotCounted) {
  ProcessOutputCursor cursor(0, 0);
  cursor.Start(0, 0);
  auto first = cursor.Output(OutputStream::kStdout, "a\xc3");  // 'a' and the first byte of 'é'
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["data"], "a");
  EXPECT_EQ(first[0]["offset"], 1);  // a client resuming here gets the whole 'é' again
  auto second = cursor.Output(OutputStream::kStdout, "\xa9!");
  EXPECT_EQ(second[0]["data"], "\xc3\xa9!");
  EXPECT_EQ(second[0]["offset"], 4);
}

TEST(ProcessOutputCursor, HeldBackBytesAreSentBeforeAGapAndAtTheEnd) {
  ProcessOutputCursor cursor(0, 0);
  cursor.Start(0, 0);
  cursor.Output(OutputStream::kStdout, "\xe2\x82");  // two of three bytes of '€'
  auto skipped = cursor.Skip(10, 0);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0]["data_b64"], "4oI=");
  EXPECT_EQ(skipped[0]["offset"], 2);
  EXPECT_EQ(skipped[1]["from"], 2);
  cursor.Output(OutputStream::kStderr, "\xf0");
  auto rest = cursor.Finish();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0]["type"], "stderr");
  EXPECT_EQ(rest[0]["offset"], 1);
}

TEST(ProcessExitEvent, NamesTheSignalAsExecDoes) {
  EXPECT_EQ(ProcessExitEvent(ctl::ReadExit(R"({"exit_code": null, "signal": 15, "timed_out": false, "duration_ms": 2.5})")),
            (json{{"type", "exit"}, {"exit_code", nullptr}, {"signal", "SIGTERM"}, {"timed_out", false},
                  {"duration_ms", 2.5}}));
  EXPECT_EQ(ProcessExitEvent(ctl::ReadExit(R"({"exit_code": 3})")),
            (json{{"type", "exit"}, {"exit_code", 3}, {"signal", nullptr}, {"timed_out", false}, {"duration_ms", 0}}));
  EXPECT_EQ(ProcessExitEvent(ctl::ReadExit("garbage"))["type"], "exit");
}

// ---- pid-or-tag lookup

TEST(SelectProcess, FindsByPidOrByTagPreferringTheRunningOne) {
  const json processes = json::parse(R"([
    {"pid": 5, "tag": "web", "state": "exited", "started_at": "2026-01-01T00:00:01.000Z"},
    {"pid": 9, "tag": "web", "state": "running", "started_at": "2026-01-01T00:00:02.000Z"},
    {"pid": 7, "tag": "job", "state": "exited", "started_at": "2026-01-01T00:00:03.000Z"},
    {"pid": 8, "tag": "job", "state": "exited", "started_at": "2026-01-01T00:00:04.000Z"},
    {"pid": 3, "tag": null, "state": "running", "started_at": "2026-01-01T00:00:00.000Z"},
    "not an object"])");
  EXPECT_EQ((*SelectProcess(processes, ProcessRef{.pid = 5}))["pid"], 5);
  EXPECT_EQ((*SelectProcess(processes, ProcessRef{.tag = "web"}))["pid"], 9);
  EXPECT_EQ((*SelectProcess(processes, ProcessRef{.tag = "job"}))["pid"], 8);
  EXPECT_EQ(SelectProcess(processes, ProcessRef{.pid = 4}), nullptr);
  EXPECT_EQ(SelectProcess(processes, ProcessRef{.tag = "none"}), nullptr);
  EXPECT_EQ(SelectProcess(json::object(), ProcessRef{.pid = 5}), nullptr);
}

TEST(StreamOffsets, AGapNeedsBothOffsets) {
  Result<ctl::StreamOffsets> offsets = ctl::DecodeStreamOffsets(R"({"stdout_offset": 3, "stderr_offset": 4})");
  ASSERT_TRUE(offsets.ok());
  EXPECT_EQ(offsets->stdout_offset, 3u);
  EXPECT_EQ(offsets->stderr_offset, 4u);
  EXPECT_FALSE(ctl::DecodeStreamOffsets(R"({"stdout_offset": 3})").ok());
  EXPECT_FALSE(ctl::DecodeStreamOffsets(R"({"stdout_offset": -3, "stderr_offset": 4})").ok());
  EXPECT_FALSE(ctl::DecodeStreamOffsets(R"("x")").ok());
}

}  // namespace
}  // namespace bulkhead::api
