#include "core/file_operation.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "common/bounded_json.h"
#include "common/ctl_protocol.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::core {
namespace asio = boost::asio;
using nlohmann::json;

namespace {

// Stdin goes out in frames of this size (well below ctl::kMaxFrame).
constexpr size_t kInputFrameBytes = 256 * 1024;
// A worker writes one line to stderr; more is kept only for the message of a broken one.
constexpr size_t kMaxStderrBytes = 64 * 1024;
// What a worker with input answers on stdout (one line) is kept up to this.
constexpr size_t kMaxCollectedBytes = 1024 * 1024;

// The worker's {"code", "message"}: the last stderr line that is such an object.
std::optional<json> ErrorLine(std::string_view text) {
  while (!text.empty()) {
    size_t end = text.size();
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ')) --end;
    text = text.substr(0, end);
    const size_t start = text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1;
    json line = ParseBoundedJson(text.substr(start));
    if (line.is_object() && line.contains("code") && line["code"].is_string()) return line;
    text = text.substr(0, start);
  }
  return std::nullopt;
}

ErrorCode CodeOfWorker(const std::string& code) {
  if (code == "not_found") return ErrorCode::kNotFound;
  if (code == "exists" || code == "not_a_directory" || code == "is_a_directory" || code == "not_empty")
    return ErrorCode::kConflict;
  if (code == "permission_denied" || code == "read_only") return ErrorCode::kForbidden;
  if (code == "disk_full") return ErrorCode::kDiskFull;
  if (code == "invalid_argument") return ErrorCode::kInvalid;
  if (code == "too_large") return ErrorCode::kTooLarge;
  return ErrorCode::kInternal;
}

bool IsSnakeCase(const std::string& code) {
  if (code.empty() || code.size() > 64 || code[0] < 'a' || code[0] > 'z') return false;
  for (char c : code)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

}  // namespace

Error FileWorkerError(std::string_view stderr_text, std::optional<int> signal) {
  if (std::optional<json> line = ErrorLine(stderr_text)) {
    std::string code = (*line)["code"].get<std::string>();
    const ErrorCode mapped = CodeOfWorker(code);
    // An unknown code from a newer (or broken) worker is an internal error, not a new API code.
    if (mapped == ErrorCode::kInternal || !IsSnakeCase(code)) code = "internal";
    std::string message = line->contains("message") && (*line)["message"].is_string()
                              ? (*line)["message"].get<std::string>()
                              : code;
    return MakeError(mapped, std::move(message), std::move(code));
  }
  if (signal) return MakeError(ErrorCode::kInternal, fmt::format("the file operation was killed by signal {}", *signal));
  std::string message = "the file operation failed";
  if (!stderr_text.empty()) message += ": " + std::string(stderr_text.substr(0, 512));
  return MakeError(ErrorCode::kInternal, std::move(message));
}

struct FileOperation::State {
  State(asio::any_io_executor executor, std::unique_ptr<CtlClient> ctl)
      : client(std::move(ctl)), ended(executor, asio::steady_timer::time_point::max()) {}

  std::unique_ptr<CtlClient> client;
  std::optional<CtlClient::Frame> unread;  // a first frame Start read that was not kStarted
  std::string stderr_text;
  std::optional<Status> outcome;  // set once the worker ended or the connection was lost
  // With input, stdout is collected in the background; `ended` is cancelled at the end.
  bool collecting = false;
  std::string collected;
  bool collected_overflow = false;
  asio::steady_timer ended;
  std::function<void()> when_ended;

  asio::awaitable<Result<CtlClient::Frame>> NextFrame() {
    if (unread) {
      CtlClient::Frame frame = std::move(*unread);
      unread.reset();
      co_return frame;
    }
    co_return co_await client->Receive();
  }

  // Takes in one frame; answers the stdout bytes it carried (usually none).
  std::string Take(Result<CtlClient::Frame> frame) {
    if (!frame.ok()) {
      End(frame.error());
      return {};
    }
    switch (frame->type) {
      case ctl::kStdout:
        return std::move(frame->payload);
      case ctl::kStderr:
        stderr_text.append(frame->payload, 0, kMaxStderrBytes - std::min(kMaxStderrBytes, stderr_text.size()));
        break;
      case ctl::kExit: {
        Result<ctl::ExitMessage> exit = ctl::DecodeExit(frame->payload);
        if (!exit.ok()) {
          End(InitProtocolError(exit.error().message));
        } else if (exit->exit_code == 0) {
          End(Status{});
        } else {
          End(FileWorkerError(stderr_text, exit->signal));
        }
        break;
      }
      case ctl::kError:
        End(ErrorFromInit(frame->payload));
        break;
      default:
        break;  // kStarted, or a frame this daemon does not know
    }
    return {};
  }

  void End(Status status) {
    outcome = std::move(status);
    client->Close();  // init ends the connection after the last frame anyway
    ended.cancel();
    if (when_ended) when_ended();
  }
};

namespace {

asio::awaitable<void> CollectOutput(std::shared_ptr<FileOperation::State> state) {
  while (!state->outcome) {
    Result<CtlClient::Frame> frame = co_await state->NextFrame();
    std::string out = state->Take(std::move(frame));
    if (state->collected.size() + out.size() > kMaxCollectedBytes) {
      state->collected_overflow = true;
    } else {
      state->collected += out;
    }
  }
}

}  // namespace

FileOperation::FileOperation(std::shared_ptr<State> state) : state_(std::move(state)) {}

FileOperation::~FileOperation() {
  // Its owner goes with it: a hook the owner gave (one that names the owner) must not run after,
  // when the worker's end arrives (the state outlives this object while its output is read).
  state_->when_ended = nullptr;
  Cancel();
}

void FileOperation::Cancel() { state_->client->Close(); }

void FileOperation::WhenEnded(std::function<void()> hook) { state_->when_ended = std::move(hook); }

asio::awaitable<Result<std::unique_ptr<FileOperation>>> FileOperation::Start(InitConnection connection,
                                                                            const json& op,
                                                                            const std::string& user,
                                                                            bool with_input) {
  co_return co_await Begin(std::move(connection), op, user, with_input, /*collect=*/with_input);
}

asio::awaitable<Result<std::unique_ptr<FileOperation>>> FileOperation::StartDuplex(InitConnection connection,
                                                                                  const json& op,
                                                                                  const std::string& user) {
  co_return co_await Begin(std::move(connection), op, user, /*with_input=*/true, /*collect=*/false);
}

asio::awaitable<Result<std::unique_ptr<FileOperation>>> FileOperation::Begin(InitConnection connection,
                                                                            const json& op,
                                                                            const std::string& user,
                                                                            bool with_input, bool collect) {
  auto executor = co_await asio::this_coro::executor;
  auto state = std::make_shared<State>(executor, std::move(connection.client));
  ctl::ExecMessage request;
  request.file_op = op;  // (Encode replaces invalid UTF-8 rather than throw)
  request.user = user;
  request.stdin_enabled = with_input;
  const std::string payload = ctl::Encode(request);
  if (Status sent = co_await state->client->Send(ctl::kExec, payload); !sent.ok()) co_return sent.error();

  Result<CtlClient::Frame> first = co_await state->client->Receive();
  if (!first.ok()) co_return first.error();
  if (first->type == ctl::kError) co_return ErrorFromInit(first->payload);
  if (first->type != ctl::kStarted) state->unread = std::move(first.value());

  if (collect) {
    state->collecting = true;
    asio::co_spawn(executor, CollectOutput(state), asio::detached);
  }
  co_return std::make_unique<FileOperation>(std::move(state));
}

asio::awaitable<Status> FileOperation::Write(std::string_view data) {
  while (!data.empty()) {
    if (state_->outcome) co_return MakeError(ErrorCode::kInternal, "the file operation ended before its input");
    const std::string_view frame = data.substr(0, kInputFrameBytes);
    if (Status sent = co_await state_->client->Send(ctl::kStdin, frame); !sent.ok()) co_return sent;
    data.remove_prefix(frame.size());
  }
  co_return Status{};
}

asio::awaitable<Status> FileOperation::CloseInput() {
  if (state_->outcome) co_return MakeError(ErrorCode::kInternal, "the file operation ended before its input");
  co_return co_await state_->client->Send(ctl::kStdinClose, {});
}

asio::awaitable<Result<std::string>> FileOperation::Read() {
  for (;;) {
    if (state_->outcome) {
      if (!state_->outcome->ok()) co_return state_->outcome->error();
      co_return std::string();
    }
    Result<CtlClient::Frame> frame = co_await state_->NextFrame();
    std::string out = state_->Take(std::move(frame));
    if (!out.empty()) co_return out;
  }
}

asio::awaitable<Result<std::string>> FileOperation::Finish(size_t max_output) {
  const Error too_large = MakeError(ErrorCode::kTooLarge, fmt::format("the answer is over {} bytes", max_output));
  if (state_->collecting) {
    while (!state_->outcome) {
      boost::system::error_code ec;
      co_await state_->ended.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (!state_->outcome->ok()) co_return state_->outcome->error();
    if (state_->collected_overflow || state_->collected.size() > max_output) co_return too_large;
    co_return std::move(state_->collected);
  }
  std::string out;
  for (;;) {
    Result<std::string> piece = co_await Read();
    if (!piece.ok()) co_return piece.error();
    if (piece->empty()) co_return out;
    if (out.size() + piece->size() > max_output) {
      Cancel();
      co_return too_large;
    }
    out += *piece;
  }
}

}  // namespace bulkhead::core
