#include "service/build_sandbox.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>

#include "common/unique_fd.h"
#include "core/exec_session.h"
#include "core/file_operation.h"
#include "service/file_output.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;
using Owner = std::optional<std::pair<uint32_t, uint32_t>>;

constexpr size_t kChunk = 256 * 1024;
constexpr size_t kMaxAnswer = 1 << 20;          // a worker's JSON line
constexpr size_t kMaxSmallFile = 4 << 20;       // /etc/passwd and the like
constexpr char kRoot[] = "root";

template <typename T>
asio::awaitable<void> StoreInto(asio::awaitable<T> work, std::optional<T>& out) {
  out.emplace(co_await std::move(work));
}

// Runs `work` on `io` and waits for it (the build's own thread, never an io thread).
template <typename T>
T AwaitOn(const asio::any_io_executor& io, asio::awaitable<T> work) {
  std::optional<T> result;
  asio::co_spawn(io, StoreInto(std::move(work), result), asio::use_future).get();
  return std::move(*result);
}

json WithOwner(json op, const Owner& owner) {
  if (owner) op["owner"] = {{"uid", owner->first}, {"gid", owner->second}};
  return op;
}

asio::awaitable<Result<std::unique_ptr<core::FileOperation>>> StartOp(core::SandboxManager& manager, std::string id,
                                                                     json op, bool with_input) {
  auto executor = co_await asio::this_coro::executor;
  Result<core::InitConnection> connection = co_await manager.ConnectInit(executor, id);
  if (!connection.ok()) co_return connection.error();
  co_return co_await core::FileOperation::Start(std::move(connection.value()), op, std::string(kRoot), with_input);
}

asio::awaitable<Result<core::ExitStatus>> RunCommand(core::SandboxManager& manager, std::string id,
                                                     core::ExecRequest request,
                                                     std::function<void(bool, std::string_view)> on_output) {
  auto executor = co_await asio::this_coro::executor;
  Result<std::unique_ptr<core::ExecSession>> session = co_await manager.StartExec(executor, id, std::move(request));
  if (!session.ok()) co_return session.error();
  for (;;) {
    Result<core::ExecEvent> event = co_await (*session)->Next();
    if (!event.ok()) co_return event.error();
    switch (event->type) {
      case core::ExecEvent::Type::kStdout: on_output(false, event->data); break;
      case core::ExecEvent::Type::kStderr: on_output(true, event->data); break;
      case core::ExecEvent::Type::kExit: co_return event->exit;
      case core::ExecEvent::Type::kStarted: break;
    }
  }
}

asio::awaitable<Status> ExtractTar(core::SandboxManager& manager, std::string id, json op, std::string tar_path) {
  UniqueFd in(::open(tar_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) co_return SystemError("open " + tar_path, errno);
  Result<std::unique_ptr<core::FileOperation>> started = co_await StartOp(manager, id, op, true);
  if (!started.ok()) co_return started.error();
  core::FileOperation& worker = **started;
  std::string buffer(kChunk, '\0');
  for (;;) {
    const ssize_t n = ::read(in.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) co_return SystemError("read " + tar_path, errno);
    if (n == 0) break;
    const std::string_view piece(buffer.data(), static_cast<size_t>(n));
    Status written = co_await worker.Write(piece);
    if (!written.ok()) break;  // the worker stopped reading: Finish says why
  }
  // The worker may end as soon as it has read the archive's end, before the padding after it
  // and the end of input are sent (their writes then fail): its answer says how it went.
  (void)co_await worker.CloseInput();
  Result<std::string> answer = co_await worker.Finish(kMaxAnswer);
  if (!answer.ok()) co_return answer.error();
  co_return Status();
}

asio::awaitable<Status> ArchiveTo(core::SandboxManager& manager, std::string id, json op, std::string out_path) {
  UniqueFd out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) co_return SystemError("create " + out_path, errno);
  Result<std::unique_ptr<core::FileOperation>> started = co_await StartOp(manager, id, op, false);
  if (!started.ok()) co_return started.error();
  for (;;) {
    Result<std::string> piece = co_await (*started)->Read();
    if (!piece.ok()) co_return piece.error();
    if (piece->empty()) co_return Status();
    size_t done = 0;
    while (done < piece->size()) {
      const ssize_t n = ::write(out.get(), piece->data() + done, piece->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) co_return SystemError("write " + out_path, errno);
      done += static_cast<size_t>(n);
    }
  }
}

asio::awaitable<Result<std::string>> RunOp(core::SandboxManager& manager, std::string id, json op, size_t max_output) {
  Result<std::unique_ptr<core::FileOperation>> started = co_await StartOp(manager, id, op, false);
  if (!started.ok()) co_return started.error();
  co_return co_await (*started)->Finish(max_output);
}

}  // namespace

Result<core::ExitStatus> BuildSandbox::Run(core::ExecRequest request,
                                           std::function<void(bool is_stderr, std::string_view data)> on_output) {
  return AwaitOn(io_, RunCommand(manager_, id_, std::move(request), std::move(on_output)));
}

Status BuildSandbox::Extract(const std::string& dir, const std::string& tar_path, Owner owner) {
  return AwaitOn(io_, ExtractTar(manager_, id_, WithOwner({{"op", "archive_extract"}, {"path", dir}}, owner), tar_path));
}

Status BuildSandbox::Archive(const std::string& path, bool one_file_system, const std::string& out_path) {
  const json op = {{"op", "archive_create"}, {"path", path}, {"one_file_system", one_file_system}};
  return AwaitOn(io_, ArchiveTo(manager_, id_, op, out_path));
}

Result<std::optional<std::string>> BuildSandbox::Read(const std::string& path) {
  Result<std::string> output = AwaitOn(io_, RunOp(manager_, id_, {{"op", "read"}, {"path", path}}, kMaxSmallFile + kMaxAnswer));
  if (!output.ok()) {
    if (output.error().detail_code == "not_found") return std::optional<std::string>();
    return output.error();
  }
  // {"size": N}\n, then the bytes.
  const size_t newline = output->find('\n');
  if (newline == std::string::npos) return FileWorkerBroken("did not announce the file's size");
  return std::optional<std::string>(output->substr(newline + 1));
}

Result<std::optional<std::string>> BuildSandbox::TypeOf(const std::string& path) {
  const json op = {{"op", "stat"}, {"path", path}, {"resolve_links", true}};
  Result<std::string> answer = AwaitOn(io_, RunOp(manager_, id_, op, kMaxAnswer));
  if (!answer.ok()) {
    if (answer.error().detail_code == "not_found") return std::optional<std::string>();
    return answer.error();
  }
  const json entry = json::parse(*answer, nullptr, /*allow_exceptions=*/false);
  if (!entry.is_object()) return FileWorkerBroken("answered no entry");
  std::string type = entry.value("type", "");
  if (type == "symlink") {
    if (!entry.contains("target_type")) return std::optional<std::string>();  // it leads nowhere
    type = entry.value("target_type", "");
  }
  return std::optional<std::string>(type);
}

Status BuildSandbox::MakeDirectory(const std::string& path, Owner owner) {
  const json op = WithOwner({{"op", "mkdir"}, {"path", path}, {"parents", true}}, owner);
  Result<std::string> answer = AwaitOn(io_, RunOp(manager_, id_, op, kMaxAnswer));
  if (!answer.ok()) return answer.error();
  return {};
}

}  // namespace bulkhead::api
