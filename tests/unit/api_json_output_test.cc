#include <gtest/gtest.h>
#include <signal.h>

#include "api/exec_output.h"
#include "api/json_output.h"
#include "http/encoding.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

TEST(SandboxToJson, HasEveryFieldOfTheContract) {
  core::SandboxInfo info;
  info.id = "sb1";
  info.state = "running";
  info.created_at = "2024-05-01T10:00:00Z";
  info.spec.env = {{"A", "1"}};
  info.spec.metadata = {{"owner", "ci"}};
  const json out = SandboxToJson(info);
  for (const char* field : {"id", "state", "image", "runtime", "created_at", "expires_at", "cpus", "memory_mb",
                            "disk_mb", "pids", "timeout_s", "idle_timeout_s", "on_timeout", "network", "metadata",
                            "env", "workdir", "user", "parent_snapshot"}) {
    EXPECT_TRUE(out.contains(field)) << field;
  }
  EXPECT_TRUE(out["expires_at"].is_null());
  EXPECT_TRUE(out["parent_snapshot"].is_null());
  EXPECT_FALSE(out.contains("usage"));
  EXPECT_EQ(out["network"], json({{"mode", "none"}, {"allow", json::array()}, {"deny", json::array()}}));
  EXPECT_EQ(out["metadata"]["owner"], "ci");
  EXPECT_EQ(out["memory_mb"], 1024);

  info.expires_at = "2024-05-01T10:05:00Z";
  info.usage = core::SandboxUsage{.cpu_s = 1.5, .memory_bytes = 100, .disk_bytes = 200, .pids = 3};
  const json with_usage = SandboxToJson(info);
  EXPECT_EQ(with_usage["expires_at"], "2024-05-01T10:05:00Z");
  EXPECT_EQ(with_usage["usage"], json({{"cpu_s", 1.5}, {"memory_bytes", 100}, {"disk_bytes", 200}, {"pids", 3}}));
}

TEST(SandboxToJson, APrivatePreviewShowsItsTokenAPublicOneHasNone) {
  core::SandboxInfo info;
  info.id = "sb1";
  EXPECT_EQ(SandboxToJson(info)["preview"], json({{"public", true}}));
  info.spec.preview = {.is_public = false, .token = "t0k"};
  EXPECT_EQ(SandboxToJson(info)["preview"], json({{"public", false}, {"token", "t0k"}}));
}

TEST(ErrorToJson, UsesDetailCodeWhenSet) {
  EXPECT_EQ(ErrorToJson(MakeError(ErrorCode::kNotFound, "gone")),
            json({{"error", {{"code", "not_found"}, {"message", "gone"}}}}));
  EXPECT_EQ(ErrorToJson(MakeError(ErrorCode::kNotFound, "gone", "sandbox_not_found"))["error"]["code"],
            "sandbox_not_found");
}

TEST(SignalName, NamesSignals) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(SIGRTMIN), "SIGRTMIN");
  EXPECT_EQ(SignalName(SIGRTMIN + 2), "SIGRTMIN+2");
  EXPECT_EQ(SignalName(200), "SIG200");
}

TEST(DumpJson, NeverThrowsOnInvalidUtf8) {
  const json value = {{"s", std::string("\xff\xfe")}};
  std::string text;
  EXPECT_NO_THROW(text = DumpJson(value));
  EXPECT_TRUE(IsValidUtf8(text));
}

// Long strings take the hand-written escaper: byte for byte what nlohmann writes, for every
// byte value, multi-byte characters, and ill-formed sequences (which nlohmann repairs).
TEST(DumpJson, LongStringsAreWrittenExactlyAsNlohmannWritesThem) {
  auto nlohmann_dump = [](const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };
  std::string every_byte;
  for (int b = 0; b < 0x80; ++b) every_byte.push_back(static_cast<char>(b));
  const std::vector<std::string> pieces = {
      every_byte, "plain text\n", "quote \" backslash \\ slash / del \x7f", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
      "\xed\xa0\x80",      // a surrogate: ill-formed
      "\xc0\xaf",           // an overlong slash: ill-formed
      "\xf4\x90\x80\x80",  // above U+10FFFF: ill-formed
      "\xe2\x82",           // cut short
      "\xff\xfe"};
  uint32_t seed = 7;
  for (int round = 0; round < 400; ++round) {
    std::string text;
    while (text.size() < 600) {
      seed = seed * 1103515245 + 12345;
      const std::string& piece = pieces[(seed >> 16) % pieces.size()];
      // Mostly well-formed pieces, so that most strings take the fast path.
      if (round % 4 != 0 && IsValidUtf8(piece) == false) continue;
      text += piece.substr(0, 1 + (seed >> 8) % piece.size());
    }
    const json event = {{"type", "stdout"}, {"data", text}, {"offset", round}};
    EXPECT_EQ(DumpJson(event), nlohmann_dump(event)) << "round " << round;
  }
  // Every byte that needs escaping (and a two-byte character), at every offset of a word.
  std::vector<std::string> specials = {"\"", "\\", "\x7f", "\xc3\xa9"};
  for (int b = 0; b < 0x20; ++b) specials.emplace_back(1, static_cast<char>(b));
  for (const std::string& special : specials) {
    for (size_t at = 0; at < 16; ++at) {
      std::string text(600, 'a');
      text.replace(at, special.size(), special);
      const json event = {{"data", text}};
      EXPECT_EQ(DumpJson(event), nlohmann_dump(event)) << "byte " << int(uint8_t(special[0])) << " at " << at;
    }
  }
  const json nested = {{"result", {{"stdout", std::string(2000, 'x')}}}, {"stderr", std::string(1000, '\n')}};
  EXPECT_EQ(DumpJson(nested), nlohmann_dump(nested));
  std::string appended = "keep";
  EXPECT_FALSE(AppendJsonString(appended, "bad \xff"));
  EXPECT_EQ(appended, "keep");
}

TEST(CollectedOutput, KeepsUpToTheLimitAndMarksTruncation) {
  CollectedOutput out(5);
  out.Append("abc");
  EXPECT_FALSE(out.truncated());
  out.Append("defgh");
  EXPECT_TRUE(out.truncated());
  json result;
  out.AddTo(result, "stdout");
  EXPECT_EQ(result["stdout"], "abcde");
  EXPECT_FALSE(result.contains("stdout_b64"));
}

TEST(CollectedOutput, ZeroLimitKeepsNothing) {
  CollectedOutput out(0);
  out.Append("x");
  EXPECT_TRUE(out.truncated());
  CollectedOutput silent(0);
  EXPECT_FALSE(silent.truncated());
}

TEST(CollectedOutput, InvalidUtf8GetsReplacementTextAndExactBytes) {
  CollectedOutput out(100);
  out.Append(std::string("ok\xff\x00", 4));
  json result;
  out.AddTo(result, "stderr");
  EXPECT_EQ(result["stderr"], std::string("ok\xEF\xBF\xBD\0", 6));
  EXPECT_EQ(Base64Decode(result["stderr_b64"].get<std::string>()), std::string("ok\xff\x00", 4));
}

TEST(CollectedOutput, CharacterCutByTheCapIsDroppedNotBase64d) {
  CollectedOutput out(4);
  out.Append("ab\xE2\x82\xAC");  // "ab€": the cap cuts the euro sign
  json result;
  out.AddTo(result, "stdout");
  EXPECT_EQ(result["stdout"], "ab");
  EXPECT_FALSE(result.contains("stdout_b64"));
}

TEST(OutputEventEncoder, TextChunksBecomeDataEvents) {
  OutputEventEncoder encoder("stdout", 1000);
  EXPECT_EQ(encoder.Push("hello\n"), json({{"type", "stdout"}, {"data", "hello\n"}}));
  EXPECT_FALSE(encoder.Push(""));
  EXPECT_FALSE(encoder.Flush());
}

TEST(OutputEventEncoder, CharacterSplitAcrossChunksStaysText) {
  OutputEventEncoder encoder("stdout", 1000);
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(encoder.Push("a" + euro.substr(0, 1)), json({{"type", "stdout"}, {"data", "a"}}));
  EXPECT_FALSE(encoder.Push(euro.substr(1, 1)));  // still unfinished: nothing to send
  EXPECT_EQ(encoder.Push(euro.substr(2) + "b"), json({{"type", "stdout"}, {"data", euro + "b"}}));
  EXPECT_FALSE(encoder.Flush());
}

TEST(OutputEventEncoder, BinaryChunksBecomeBase64) {
  OutputEventEncoder encoder("stderr", 1000);
  const std::string bytes("\x00\xff\xfe", 3);
  EXPECT_EQ(encoder.Push(bytes), json({{"type", "stderr"}, {"data_b64", Base64Encode(bytes)}}));
}

TEST(OutputEventEncoder, UnfinishedCharacterAtTheEndIsFlushedAsBase64) {
  OutputEventEncoder encoder("stdout", 1000);
  EXPECT_EQ(encoder.Push("x\xE2\x82"), json({{"type", "stdout"}, {"data", "x"}}));
  EXPECT_EQ(encoder.Flush(), json({{"type", "stdout"}, {"data_b64", Base64Encode("\xE2\x82")}}));
  EXPECT_FALSE(encoder.Flush());
}

TEST(OutputEventEncoder, CapDropsTheRest) {
  OutputEventEncoder encoder("stdout", 4);
  EXPECT_EQ(encoder.Push("abc"), json({{"type", "stdout"}, {"data", "abc"}}));
  EXPECT_EQ(encoder.Push("defg"), json({{"type", "stdout"}, {"data", "d"}}));
  EXPECT_TRUE(encoder.truncated());
  EXPECT_FALSE(encoder.Push("more"));
  EXPECT_FALSE(encoder.Flush());
}

TEST(ExitFields, ExitCodeOrSignalName) {
  core::ExitStatus exited{.exit_code = 3, .signal = std::nullopt, .timed_out = false, .duration_ms = 1.5};
  EXPECT_EQ(ExitFields(exited, false), json({{"exit_code", 3}, {"signal", nullptr}, {"duration_ms", 1.5},
                                             {"timed_out", false}, {"truncated", false}}));
  core::ExitStatus killed{.exit_code = std::nullopt, .signal = SIGKILL, .timed_out = true, .duration_ms = 10};
  const json fields = ExitFields(killed, true);
  EXPECT_TRUE(fields["exit_code"].is_null());
  EXPECT_EQ(fields["signal"], "SIGKILL");
  EXPECT_EQ(fields["timed_out"], true);
  EXPECT_EQ(fields["truncated"], true);
}

}  // namespace
}  // namespace bulkhead::api
