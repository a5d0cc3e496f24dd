#include "e2b/template_start.h"

#include <algorithm>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "common/base64.h"
#include "core/exec_session.h"
#include "e2b/template_plan.h"
#include "service/init_process.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {
namespace {

namespace asio = boost::asio;
using json = nlohmann::json;

constexpr char kStartTag[] = "e2b-start";
constexpr int64_t kReadyTryS = 30;  // one try of the ready command

// E2B runs both commands with bash; an image without it gets sh.
std::vector<std::string> ShellArgv(const std::string& command) {
  return {"/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -c \"$1\"; fi; exec /bin/sh -c \"$1\"",
          "e2b-template", command};
}

Error StartFailed(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message), "start_failed"); }

// Runs the ready command once: its exit code (-1 for a signal).
asio::awaitable<Result<int>> TryReady(core::SandboxManager& manager, const std::string& id, const std::string& ready) {
  auto executor = co_await asio::this_coro::executor;
  core::ExecRequest request;
  request.argv = ShellArgv(ready);
  request.timeout_s = kReadyTryS;
  request.output_limit = 4096;
  Result<std::unique_ptr<core::ExecSession>> session = co_await manager.StartExec(executor, id, std::move(request));
  if (!session.ok()) co_return session.error();
  for (;;) {
    Result<core::ExecEvent> event = co_await (*session)->Next();
    if (!event.ok()) co_return event.error();
    if (event->type == core::ExecEvent::Type::kExit) co_return event->exit.exit_code.value_or(-1);
  }
}

}  // namespace

StartCommands StartCommandsOf(const core::ImageInfo& image) {
  StartCommands commands;
  if (!image.config) return commands;
  const auto& labels = image.config->labels;
  if (auto found = labels.find(kStartCmdLabel); found != labels.end())
    commands.start = Base64Decode(found->second).value_or("");
  if (auto found = labels.find(kReadyCmdLabel); found != labels.end())
    commands.ready = Base64Decode(found->second).value_or("");
  return commands;
}

asio::awaitable<Status> StartTemplateCommands(core::SandboxManager& manager, std::string sandbox_id,
                                              StartCommands commands, std::chrono::milliseconds limit) {
  auto executor = co_await asio::this_coro::executor;
  if (!commands.start.empty()) {
    api::ProcessOptions options;
    options.request.argv = ShellArgv(commands.start);
    options.request.timeout_s = 0;
    options.tag = kStartTag;
    Result<json> started = co_await api::StartProcess(manager, executor, sandbox_id, options);
    if (!started.ok()) co_return started.error();
  }
  if (commands.ready.empty()) co_return Status();

  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::chrono::milliseconds pause(50);
  asio::steady_timer timer(executor);
  for (;;) {
    Result<int> ready = co_await TryReady(manager, sandbox_id, commands.ready);
    if (!ready.ok()) co_return ready.error();
    if (*ready == 0) co_return Status();
    if (!commands.start.empty()) {
      Result<json> process = co_await api::FindProcess(manager, executor, sandbox_id, kStartTag);
      if (process.ok() && process->value("state", "") == "exited" && process->value("exit_code", json()) != json(0)) {
        const std::string code = process->value("exit_code", json()).dump();
        co_return StartFailed(fmt::format("the start command failed (exit code {}) before the ready command succeeded",
                                          code));
      }
    }
    if (std::chrono::steady_clock::now() + pause > deadline) {
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limit).count();
      co_return StartFailed(fmt::format("the ready command did not succeed within {} s (last exit code {})", seconds,
                                        *ready));
    }
    timer.expires_after(pause);
    co_await timer.async_wait(asio::use_awaitable);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace bulkhead::e2b
