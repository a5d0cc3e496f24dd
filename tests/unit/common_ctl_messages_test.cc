// Init's protocol messages (common/ctl_messages.h): what one side encodes the other decodes,
// and what either side receives is checked, never trusted.
#include <gtest/gtest.h>

#include "common/ctl_messages.h"
#include "common/ctl_protocol.h"

namespace bulkhead::ctl {
namespace {

ProcessInfo AProcess() {
  ProcessInfo p;
  p.pid = 12;
  p.tag = "web";
  p.cmd = {"python3", "-m", "http.server"};
  p.exited = true;
  p.exit_code = 3;
  p.started_at = "2026-12-02T10:00:00.000Z";
  p.exited_at = "2026-12-02T10:00:01.000Z";
  p.pty = PtySize{120, 40};
  p.stdout_offset = 5;
  p.stderr_offset = 6;
  p.stdout_start = 1;
  p.stderr_start = 2;
  return p;
}

TEST(CtlMessages, ExecRoundTripsEveryField) {
  ExecMessage m;
  m.argv = {"sh", "-c", "echo hi"};
  m.env = {"A=1", "B=x=y"};
  m.cwd = "/workspace";
  m.user = "1000:1000";
  m.timeout_ms = 5000;
  m.stdin_enabled = true;
  m.background = true;
  m.attach = true;
  m.tag = "dev";
  m.pty = PtySize{100, 30};
  m.output_limit = 1 << 20;
  m.nofile = 4096;
  auto back = DecodeExec(Encode(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->argv, m.argv);
  EXPECT_EQ(back->env, m.env);
  EXPECT_EQ(back->cwd, "/workspace");
  EXPECT_EQ(back->user, "1000:1000");
  EXPECT_EQ(back->timeout_ms, 5000u);
  EXPECT_TRUE(back->stdin_enabled && back->background && back->attach);
  EXPECT_EQ(back->tag, "dev");
  EXPECT_EQ(back->pty->cols, 100);
  EXPECT_EQ(back->output_limit, 1u << 20);
  EXPECT_EQ(back->nofile, 4096u);
  EXPECT_FALSE(back->file_op);
}

TEST(CtlMessages, AFileOperationHasNoArgv) {
  ExecMessage m;
  m.file_op = nlohmann::json{{"op", "stat"}, {"path", "/etc"}};
  m.user = "root";
  auto back = DecodeExec(Encode(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back->argv.empty());
  EXPECT_EQ((*back->file_op)["op"], "stat");
  EXPECT_FALSE(DecodeExec(R"({"file_op":{"op":"stat"},"argv":["x"]})").ok());
  EXPECT_FALSE(DecodeExec(R"({"file_op":{"op":"stat"},"background":true})").ok());
}

TEST(CtlMessages, MalformedExecRequestsAreRefused) {
  for (const char* bad : {"", "[]", "{}", R"({"argv":[]})", R"({"argv":[""]})", R"({"argv":"sh"})",
                          R"({"argv":["a\u0000b"]})", R"({"argv":["sh"],"env":["NOEQUALS"]})",
                          R"({"argv":["sh"],"env":["=x"]})", R"({"argv":["sh"],"cwd":""})",
                          R"({"argv":["sh"],"timeout_ms":-1})", R"({"argv":["sh"],"nofile":0})",
                          R"({"argv":["sh"],"stdin":"yes"})", R"({"argv":["sh"],"pty":{"cols":0}})",
                          R"({"argv":["sh"],"pty":{"cols":10001}})", R"({"argv":["sh"],"tag":7})"}) {
    EXPECT_FALSE(DecodeExec(bad).ok()) << bad;
  }
  std::string deep(100000, '[');
  EXPECT_FALSE(DecodeExec(deep).ok());
}

TEST(CtlMessages, AnswersRoundTrip) {
  auto started = DecodeStarted(Encode(StartedMessage{12, AProcess()}));
  ASSERT_TRUE(started.ok()) << started.error().message;
  EXPECT_EQ(started->pid, 12);
  EXPECT_EQ(started->process->cmd, AProcess().cmd);
  EXPECT_EQ(started->process->pty->rows, 40);
  EXPECT_EQ(started->process->exit_code, 3);

  auto attached = DecodeAttached(Encode(AttachedMessage{AProcess(), {7, 8}}));
  ASSERT_TRUE(attached.ok()) << attached.error().message;
  EXPECT_EQ(attached->start.stdout_offset, 7u);
  EXPECT_EQ(attached->process.exited_at, "2026-12-02T10:00:01.000Z");

  auto list = DecodeProcessList(Encode(ProcessList{{AProcess(), AProcess()}}));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->processes.size(), 2u);

  ExitMessage exit;
  exit.signal = 9;
  exit.timed_out = true;
  exit.duration_ms = 12.3456789;
  auto back = DecodeExit(Encode(exit));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->exit_code);
  EXPECT_EQ(back->signal, 9);
  EXPECT_TRUE(back->timed_out);
  EXPECT_DOUBLE_EQ(back->duration_ms, 12.346);

  auto error = DecodeError(Encode(ErrorMessage{ErrorWord::kNotFound, "no process 9"}));
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(CodeOf(error->code), ErrorCode::kNotFound);
  EXPECT_EQ(error->message, "no process 9");
  EXPECT_EQ(WordOf(ErrorCode::kBadRequest), ErrorWord::kInvalidArgument);

  auto attach = DecodeAttach(Encode(AttachMessage{5, false, true, true, 10, 20}));
  ASSERT_TRUE(attach.ok());
  EXPECT_FALSE(attach->output);
  EXPECT_EQ(attach->stderr_offset, 20u);
  EXPECT_TRUE(DecodeAttach(R"({"pid":5})")->output) << "output is the default of an attach";
}

TEST(CtlMessages, WhatInitSendsIsCheckedNotTrusted) {
  EXPECT_FALSE(DecodeStarted(R"({"pid":0})").ok());
  EXPECT_FALSE(DecodeStarted(R"({"pid":4294967296})").ok());
  EXPECT_FALSE(DecodeStarted(R"({"pid":"12"})").ok());
  EXPECT_FALSE(DecodeStarted(R"({"pid":12,"process":{"pid":12}})").ok()) << "a process missing its fields";
  EXPECT_FALSE(DecodeProcessList(R"({"processes":{}})").ok());
  EXPECT_FALSE(DecodeProcessList(R"({"processes":[{"pid":1,"cmd":["x"],"state":"zombie"}]})").ok());
  EXPECT_FALSE(DecodeAttached(R"({"stdout_offset":1,"stderr_offset":-1})").ok());
  // An exit's malformed fields are left out; the exit is still an exit.
  auto exit = DecodeExit(R"({"exit_code":300,"signal":"KILL","timed_out":1,"duration_ms":-5})");
  ASSERT_TRUE(exit.ok());
  EXPECT_FALSE(exit->exit_code);
  EXPECT_FALSE(exit->signal);
  EXPECT_FALSE(exit->timed_out);
  EXPECT_EQ(exit->duration_ms, 0);
  EXPECT_FALSE(DecodeExit("not json").ok());
  // An unknown error word is internal.
  auto error = DecodeError(R"({"code":"root_now","message":"x"})");
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->code, ErrorWord::kInternal);
}

TEST(CtlMessages, SudoUsersAndSignalsAreBounded) {
  EXPECT_TRUE(DecodeSudoUsers(Encode(SudoUsersMessage{{"user", "1000"}})).ok());
  EXPECT_FALSE(DecodeSudoUsers(R"({"users":["a:b"]})").ok());
  EXPECT_FALSE(DecodeSudoUsers(R"({"users":[""]})").ok());
  EXPECT_FALSE(DecodeSudoUsers(R"({})").ok());
  SudoUsersMessage many;
  many.users.assign(kMaxSudoUsers + 1, "u");
  EXPECT_FALSE(DecodeSudoUsers(Encode(many)).ok());
  EXPECT_EQ(DecodeSignal(Encode(SignalMessage{15}))->signal, 15);
  EXPECT_FALSE(DecodeSignal(R"({"signal":65})").ok());
  EXPECT_FALSE(DecodeSignal(R"({"signal":0})").ok());
}

TEST(CtlMessages, AFreezeSaysWhichWayAndItsAnswerWhetherTheWorkloadStopped) {
  EXPECT_TRUE(DecodeFreeze(Encode(FreezeMessage{true}))->frozen);
  EXPECT_FALSE(DecodeFreeze(Encode(FreezeMessage{false}))->frozen);
  EXPECT_FALSE(DecodeFreeze(R"({})").ok());  // no default direction
  EXPECT_FALSE(DecodeFreeze(R"({"frozen":1})").ok());
  EXPECT_FALSE(DecodeFreeze(R"([true])").ok());
}

TEST(CtlMessages, AThawCarriesTheHostsClockAndEntropyAndAFreezeNeither) {
  FreezeMessage thaw{false, 1796428203000000000, std::string(64, 'a')};
  auto decoded = DecodeFreeze(Encode(thaw));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->realtime_ns, thaw.realtime_ns);
  EXPECT_EQ(decoded->entropy, thaw.entropy);
  EXPECT_EQ(Encode(FreezeMessage{false}), R"({"frozen":false})");
  EXPECT_FALSE(DecodeFreeze(R"({"frozen":true,"realtime_ns":5})").ok());
  EXPECT_FALSE(DecodeFreeze(R"({"frozen":false,"realtime_ns":-5})").ok());
  EXPECT_FALSE(DecodeFreeze(R"({"frozen":false,"entropy":"XYZ"})").ok());
  EXPECT_FALSE(DecodeFreeze(R"({"frozen":false,"entropy":")" + std::string(64, 'A') + R"("})").ok());
  EXPECT_TRUE(DecodeFrozen(Encode(FrozenMessage{true}))->settled);
  EXPECT_FALSE(DecodeFrozen(Encode(FrozenMessage{false}))->settled);
  EXPECT_FALSE(DecodeFrozen(R"({"settled":"yes"})").ok());
}

// The hex of a JSON text (what EncodeGuestBootArg carries), to build hostile arguments.
std::string Hex(const std::string& text) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : text) hex += {digits[c >> 4], digits[c & 15]};
  return hex;
}

TEST(CtlMessages, TheGuestBootArgumentRoundTripsAsHexTheKernelCommandLineKeepsWhole) {
  GuestBootMessage m;
  m.limits = {64, 256 << 20, 1.5};
  m.vsock_port = 1024;
  m.volumes = {{"vol0", "/data", false}, {"vol1", "/opt/ro dir", true}};
  m.network = true;
  const std::string arg = EncodeGuestBootArg(m);
  EXPECT_EQ(arg.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto back = DecodeGuestBootArg(arg);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->limits.pids, 64);
  EXPECT_EQ(back->limits.memory_bytes, 256 << 20);
  EXPECT_DOUBLE_EQ(back->limits.cpus, 1.5);
  EXPECT_EQ(back->vsock_port, 1024u);
  ASSERT_EQ(back->volumes.size(), 2u);
  EXPECT_EQ(back->volumes[1].tag, "vol1");
  EXPECT_EQ(back->volumes[1].target, "/opt/ro dir");
  EXPECT_TRUE(back->volumes[1].read_only);
  EXPECT_FALSE(back->volumes[0].read_only);
  EXPECT_TRUE(back->network);
  m.network = false;
  EXPECT_FALSE(DecodeGuestBootArg(EncodeGuestBootArg(m))->network);
  EXPECT_EQ(back->realtime_ns, 0);  // a booted guest's clock is its own
  EXPECT_TRUE(back->entropy.empty());
}

TEST(CtlMessages, ARestoredGuestsBootMessageCarriesTheHostsClockAndEntropy) {
  GuestBootMessage m;
  m.limits = {64, 256 << 20, 1};
  m.vsock_port = 1024;
  m.realtime_ns = 1796000000123456789;
  m.entropy = std::string(32, 'a') + std::string(32, '9');
  auto back = DecodeGuestBootArg(EncodeGuestBootArg(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->realtime_ns, 1796000000123456789);
  EXPECT_EQ(back->entropy, m.entropy);
}

TEST(CtlMessages, AHostileGuestBootArgumentIsRefused) {
  const std::string limits = R"("limits":{"pids":4,"memory_bytes":1048576,"cpus":1})";
  auto with = [&](const std::string& rest) { return Hex("{" + limits + "," + rest + "}"); };
  EXPECT_TRUE(DecodeGuestBootArg(with(R"("vsock_port":9)")).ok());
  for (const std::string& bad : {
           std::string("zz"), std::string("abc"), Hex("[]"), Hex(R"({"vsock_port":9})"),
           with(R"("vsock_port":0)"), with(R"("vsock_port":4294967295)"), with(R"("vsock_port":-1)"),
           with(R"("vsock_port":9,"volumes":[{"tag":"Vol","target":"/d"}])"),
           with(R"("vsock_port":9,"volumes":[{"tag":"","target":"/d"}])"),
           with(R"("vsock_port":9,"volumes":[{"tag":"v","target":"d"}])"),
           with(R"("vsock_port":9,"volumes":[{"tag":"v","target":"/"}])"),
           with(R"("vsock_port":9,"volumes":[{"tag":"v","target":"/a/../etc"}])"),
           with(R"("vsock_port":9,"volumes":[{"tag":"v","target":"/a/./b"}])"),
           with(R"("vsock_port":9,"volumes":[{"tag":"v","target":"/a","read_only":"yes"}])"),
           with(R"("vsock_port":9,"volumes":{"tag":"v"})"),
           with(R"("vsock_port":9,"network":1)"),
           with(R"("vsock_port":9,"realtime_ns":0)"), with(R"("vsock_port":9,"realtime_ns":"1")"),
           with(R"("vsock_port":9,"entropy":"abcd")"),
           with(R"("vsock_port":9,"entropy":")" + std::string(64, 'G') + "\""),
       })
    EXPECT_FALSE(DecodeGuestBootArg(bad).ok()) << bad;
  std::string many = R"("vsock_port":9,"volumes":[)";
  for (size_t i = 0; i <= kMaxGuestVolumes; i++) many += std::string(i ? "," : "") + R"({"tag":"v","target":"/d"})";
  EXPECT_FALSE(DecodeGuestBootArg(with(many + "]")).ok());
}

}  // namespace
}  // namespace bulkhead::ctl
