#include "service/make_directory.h"

#include <boost/asio/this_coro.hpp>

#include "core/file_operation.h"
#include "service/file_request.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

// The JSON answer of a file operation (one Entry) is small.
constexpr size_t kMaxAnswerBytes = 1024 * 1024;

}  // namespace

asio::awaitable<Status> MakeDirectoryInside(core::SandboxManager& manager, const std::string& sandbox_id,
                                            const std::string& path, const std::string& user) {
  auto executor = co_await asio::this_coro::executor;
  Result<core::InitConnection> connection = co_await manager.ConnectInit(executor, sandbox_id);
  if (!connection.ok()) co_return connection.error();
  FileRequest request;
  request.op = FileOp::kMkdir;
  request.path = path;
  Result<json> file_op = FileOpJson(request, path);
  if (!file_op.ok()) co_return file_op.error();
  Result<std::unique_ptr<core::FileOperation>> started =
      co_await core::FileOperation::Start(std::move(connection.value()), *file_op, user, false);
  if (!started.ok()) co_return started.error();
  Result<std::string> answer = co_await (*started)->Finish(kMaxAnswerBytes);
  if (!answer.ok()) co_return answer.error();
  co_return Status{};
}

}  // namespace bulkhead::api
