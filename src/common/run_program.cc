#include "common/run_program.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"

extern char** environ;

namespace bulkhead {

Result<std::string> RunProgramOutput(const std::vector<std::string>& argv) {
  if (argv.empty()) return MakeError(ErrorCode::kInternal, "RunProgram: empty argv");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return SystemError("pipe", errno);
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return SystemError("spawn " + argv[0], rc);
  write_end.reset();

  std::string output;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
    if (output.size() > 64 * 1024) output.erase(0, output.size() - 4096);  // keep the tail
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return SystemError("waitpid " + argv[0], errno);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return output;
  if (output.size() > 1024) output.erase(0, output.size() - 1024);
  std::string how = WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                      : "killed by signal " + std::to_string(WTERMSIG(status));
  return MakeError(ErrorCode::kInternal, argv[0] + " " + how + ": " + output);
}

Status RunProgram(const std::vector<std::string>& argv) {
  auto output = RunProgramOutput(argv);
  if (!output) return output.error();
  return {};
}

std::string FindProgram(const std::vector<std::string>& candidates) {
  for (const auto& path : candidates) {
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return {};
}

}  // namespace bulkhead
