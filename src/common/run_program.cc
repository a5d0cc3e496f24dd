#include "common/run_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/unique_fd.h"

extern char** environ;

namespace bulkhead {

Result<std::string> RunProgramOutput(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
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

  using Clock = std::chrono::steady_clock;
  const bool bounded = timeout != std::chrono::milliseconds::max();
  const auto deadline = bounded ? Clock::now() + timeout : Clock::time_point::max();
  bool timed_out = false;
  std::string output;
  char buf[4096];
  for (;;) {
    if (bounded) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{read_end.get(), POLLIN, 0};
      int ready = left > 0 ? ::poll(&pfd, 1, int(std::min<int64_t>(left, 60'000))) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0 && Clock::now() >= deadline) {
        // (Its children keep the pipe open too: stop reading, not only wait for it.)
        ::kill(pid, SIGKILL);
        timed_out = true;
        break;
      }
      if (ready == 0) continue;
    }
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
  if (!timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0) return output;
  if (output.size() > 1024) output.erase(0, output.size() - 1024);
  if (timed_out)
    return MakeError(ErrorCode::kUnavailable, argv[0] + " did not finish within " + std::to_string(timeout.count()) +
                                                  " ms: " + output);
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
