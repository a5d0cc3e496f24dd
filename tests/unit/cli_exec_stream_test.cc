#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "client/exec_stream.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

// An in-memory file standing in for the terminal's stdout or stderr.
class CapturedOutput {
 public:
  CapturedOutput() : fd_(memfd_create("captured", MFD_CLOEXEC)) {}
  int fd() const { return fd_.get(); }
  std::string Contents() const {
    std::string data;
    char buffer[4096];
    ssize_t n;
    off_t offset = 0;
    while ((n = pread(fd_.get(), buffer, sizeof(buffer), offset)) > 0) {
      data.append(buffer, static_cast<size_t>(n));
      offset += n;
    }
    return data;
  }

 private:
  UniqueFd fd_;
};

TEST(CliExecStream, WritesStdoutAndStderrEventsToTheirStreams) {
  CapturedOutput out, err;
  ExecOutputPrinter printer(OutputFds{out.fd(), err.fd()});
  ASSERT_TRUE(printer.HandleLine(R"({"type":"start","pid":12})").ok());
  ASSERT_TRUE(printer.HandleLine(R"({"type":"stdout","data":"hello\n"})").ok());
  ASSERT_TRUE(printer.HandleLine(R"({"type":"stderr","data":"oops\n"})").ok());
  // "\xff\x00b" is not UTF-8: it travels as data_b64.
  ASSERT_TRUE(printer.HandleLine(R"({"type":"stdout","data_b64":"/wBi"})").ok());
  EXPECT_FALSE(printer.outcome().has_value());
  ASSERT_TRUE(printer.HandleLine(
                     R"({"type":"exit","exit_code":3,"signal":null,"duration_ms":1.5,"timed_out":false})")
                  .ok());
  EXPECT_EQ(out.Contents(), std::string("hello\n\xff\0b", 9));
  EXPECT_EQ(err.Contents(), "oops\n");
  ASSERT_TRUE(printer.outcome().has_value());
  EXPECT_EQ(printer.outcome()->exit_code, 3);
  EXPECT_EQ(ShellExitCode(*printer.outcome()), 3);
}

TEST(CliExecStream, ExitCodesFollowShellConventions) {
  EXPECT_EQ(ShellExitCode({.exit_code = 0}), 0);
  EXPECT_EQ(ShellExitCode({.exit_code = 42}), 42);
  EXPECT_EQ(ShellExitCode({.signal = SIGKILL}), 137);
  EXPECT_EQ(ShellExitCode({.signal = SIGKILL, .timed_out = true}), 124);
  EXPECT_EQ(ShellExitCode({}), 1);
}

TEST(CliExecStream, SignalsArriveAsNamesOrNumbers) {
  EXPECT_EQ(SignalFromJson(nlohmann::json("SIGKILL")), SIGKILL);
  EXPECT_EQ(SignalFromJson(nlohmann::json("TERM")), SIGTERM);
  EXPECT_EQ(SignalFromJson(nlohmann::json(9)), 9);
  EXPECT_EQ(SignalFromJson(nlohmann::json("15")), 15);
  EXPECT_FALSE(SignalFromJson(nlohmann::json(nullptr)).has_value());
  EXPECT_FALSE(SignalFromJson(nlohmann::json("SIGNOPE")).has_value());
}

TEST(CliExecStream, AnExitEventWithASignalNameMapsTo128PlusN) {
  CapturedOutput out, err;
  ExecOutputPrinter printer(OutputFds{out.fd(), err.fd()});
  ASSERT_TRUE(printer.HandleLine(R"({"type":"exit","exit_code":null,"signal":"SIGKILL","timed_out":true})").ok());
  EXPECT_EQ(printer.outcome()->signal, SIGKILL);
  EXPECT_EQ(ShellExitCode(*printer.outcome()), 124);
}

TEST(CliExecStream, AnErrorEventBecomesAnErrorWithTheApiCode) {
  CapturedOutput out, err;
  ExecOutputPrinter printer(OutputFds{out.fd(), err.fd()});
  Status nested = printer.HandleLine(R"({"type":"error","error":{"code":"no_such_cwd","message":"no /x"}})");
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.error().detail_code, "no_such_cwd");
  EXPECT_EQ(nested.error().message, "no /x");
  Status flat = printer.HandleLine(R"({"type":"error","code":"sandbox_gone","message":"deleted"})");
  ASSERT_FALSE(flat.ok());
  EXPECT_EQ(flat.error().detail_code, "sandbox_gone");
}

TEST(CliExecStream, MalformedLinesAreErrorsAndUnknownEventsAreIgnored) {
  CapturedOutput out, err;
  ExecOutputPrinter printer(OutputFds{out.fd(), err.fd()});
  EXPECT_FALSE(printer.HandleLine("not json").ok());
  EXPECT_FALSE(printer.HandleLine("[1,2]").ok());
  EXPECT_FALSE(printer.HandleLine(R"({"data":"x"})").ok());
  EXPECT_FALSE(printer.HandleLine(R"({"type":"stdout","data_b64":"!!"})").ok());
  EXPECT_TRUE(printer.HandleLine(R"({"type":"progress","x":1})").ok());
}

TEST(CliExecStream, AWholeResultPrefersTheExactBytesOverReplacedText) {
  CapturedOutput out, err;
  ExecOutputPrinter printer(OutputFds{out.fd(), err.fd()});
  auto result = nlohmann::json::parse(
      R"({"exit_code":0,"signal":null,"stdout":"a\ufffd","stdout_b64":"Yf8=","stderr":"e","timed_out":false})");
  ASSERT_TRUE(printer.HandleResult(result).ok());
  EXPECT_EQ(out.Contents(), "a\xff");
  EXPECT_EQ(err.Contents(), "e");
  EXPECT_EQ(ShellExitCode(*printer.outcome()), 0);
}

TEST(CliExecStream, WritingToAClosedPipeIsReportedAsOutputClosed) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  read_end.reset();
  auto previous = signal(SIGPIPE, SIG_IGN);
  Status status = WriteAll(write_end.get(), "x");
  signal(SIGPIPE, previous);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, kOutputClosed);
}

}  // namespace
}  // namespace bulkhead::cli
