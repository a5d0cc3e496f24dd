// Running a CLI command in-process against a TestServer, with memfds as its terminal:
// shared by the CLI command tests.
#pragma once
#include <sys/mman.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/commands.h"
#include "cli_test_server.h"
#include "common/unique_fd.h"

namespace bulkhead::cli::testing {

inline std::string ReadBack(int fd) {
  std::string data;
  char buffer[4096];
  ssize_t n;
  off_t offset = 0;
  while ((n = pread(fd, buffer, sizeof(buffer), offset)) > 0) {
    data.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  return data;
}

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Parses `args` like main() does and runs the command with memfds as its terminal.
inline CliResult RunCli(const TestServer& server, std::vector<std::string> args, const std::string& stdin_data = "") {
  unsetenv("BULKHEAD_API_KEY");
  unsetenv("BULKHEAD_URL");
  unsetenv("BULKHEAD_STATE");
  args.insert(args.begin(), {"bulkhead", "--url", server.url(), "--state-dir", server.dir()});
  std::vector<const char*> argv;
  for (const auto& arg : args) argv.push_back(arg.c_str());
  CLI::App app{"bulkhead", "bulkhead"};
  CommandLine line;
  DefineCommandLine(app, line);
  app.parse(static_cast<int>(argv.size()), argv.data());

  UniqueFd in(memfd_create("in", MFD_CLOEXEC)), out(memfd_create("out", MFD_CLOEXEC)),
      err(memfd_create("err", MFD_CLOEXEC));
  EXPECT_EQ(write(in.get(), stdin_data.data(), stdin_data.size()), static_cast<ssize_t>(stdin_data.size()));
  lseek(in.get(), 0, SEEK_SET);
  CliResult result;
  result.exit_code = RunClientCommand(line, CommandIo{in.get(), out.get(), err.get(), /*handle_interrupts=*/false});
  result.out = ReadBack(out.get());
  result.err = ReadBack(err.get());
  return result;
}

inline const RecordedRequest* Find(const std::vector<RecordedRequest>& requests, const std::string& method,
                            const std::string& target) {
  for (const auto& request : requests) {
    if (request.method == method && request.target == target) return &request;
  }
  return nullptr;
}

}  // namespace bulkhead::cli::testing
