// `bulkhead`: the daemon (`serve`) and the command line client in one binary.
#include <csignal>

#include <CLI/CLI.hpp>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "daemon/daemon.h"

int main(int argc, char** argv) {
  CLI::App app{"bulkhead", "bulkhead"};
  bulkhead::cli::CommandLine line;
  bulkhead::cli::DefineCommandLine(app, line);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return bulkhead::cli::ExitForParseError(app, error);
  }
  if (line.command == bulkhead::cli::Command::kServe) {
    return bulkhead::api::RunDaemon(bulkhead::cli::DaemonConfigFromCommandLine(line));
  }
  // A closed stdout (`bulkhead run ... | head`) must end in cleanup, not a silent death.
  std::signal(SIGPIPE, SIG_IGN);
  return bulkhead::cli::RunClientCommand(line);
}
