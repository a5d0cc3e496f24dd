#include "core/exec_session.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"

namespace bulkhead::core {
namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

std::string Frame(uint8_t type, std::string_view payload) {
  std::string out(ctl::kHeaderSize, '\0');
  ctl::EncodeHeader(reinterpret_cast<uint8_t*>(out.data()), type, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

Error LostInit(const boost::system::error_code& ec) {
  return MakeError(ErrorCode::kInternal, "lost the connection to the sandbox's init: " + ec.message(),
                   "sandbox_unreachable");
}

}  // namespace

ExecSession::ExecSession(asio::local::stream_protocol::socket socket) : client_(std::move(socket)) {}

ExecSession::~ExecSession() { Cancel(); }

// shutdown reaches the writer's duplicate descriptor too; init sees the end and kills the command.
void ExecSession::Cancel() { client_.Close(); }

asio::awaitable<Result<std::unique_ptr<ExecSession>>> ExecSession::Start(asio::any_io_executor executor,
                                                                          std::shared_ptr<const runtime::InitDialer> init,
                                                                          std::string request_json,
                                                                          std::optional<std::string> stdin_data) {
  auto dialed = co_await init->Dial(executor);
  if (!dialed) co_return dialed.error();
  asio::local::stream_protocol::socket socket = std::move(*dialed);
  boost::system::error_code ec;
  // The request and all of stdin go out in one write: stdin is bounded by the API (16 MiB),
  // and init reads it into the command's pipe as the command consumes it.
  std::string out = Frame(ctl::kExec, request_json);
  if (stdin_data) {
    for (size_t off = 0; off < stdin_data->size(); off += ctl::kMaxFrame / 2)
      out += Frame(ctl::kStdin, std::string_view(*stdin_data).substr(off, ctl::kMaxFrame / 2));
    out += Frame(ctl::kStdinClose, {});
  }
  // Write on a duplicate of the socket while the session reads: a command may print before
  // it has read all its stdin, and the two directions must not share one asio object.
  int dup_fd = ::fcntl(socket.native_handle(), F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) co_return SystemError("dup control socket", errno);
  auto writer = std::make_shared<asio::local::stream_protocol::socket>(executor);
  writer->assign(asio::local::stream_protocol(), dup_fd, ec);
  if (ec) {
    ::close(dup_fd);
    co_return LostInit(ec);
  }
  asio::co_spawn(
      executor,
      [writer, data = std::move(out)]() -> asio::awaitable<void> {
        boost::system::error_code wec;
        co_await asio::async_write(*writer, asio::buffer(data), asio::redirect_error(asio::use_awaitable, wec));
      },
      asio::detached);
  co_return std::make_unique<ExecSession>(std::move(socket));
}

asio::awaitable<Result<ExecEvent>> ExecSession::Next() {
  if (done_) co_return MakeError(ErrorCode::kInternal, "exec session already ended");
  for (;;) {
    Result<CtlClient::Frame> frame = co_await client_.Receive();
    if (!frame.ok()) {
      done_ = true;
      co_return frame.error();
    }
    ExecEvent ev;
    switch (frame->type) {
      case ctl::kStarted: {
        Result<ctl::StartedMessage> started = ctl::DecodeStarted(frame->payload);
        if (!started.ok()) {
          done_ = true;
          co_return InitProtocolError(started.error().message);
        }
        ev.type = ExecEvent::Type::kStarted;
        ev.pid = started->pid;
        co_return ev;
      }
      case ctl::kStdout:
      case ctl::kStderr:
        ev.type = frame->type == ctl::kStdout ? ExecEvent::Type::kStdout : ExecEvent::Type::kStderr;
        ev.data = std::move(frame->payload);
        co_return ev;
      case ctl::kExit: {
        done_ = true;
        Result<ctl::ExitMessage> exit = ctl::DecodeExit(frame->payload);
        if (!exit.ok()) co_return InitProtocolError(exit.error().message);
        ev.type = ExecEvent::Type::kExit;
        ev.exit = *exit;
        co_return ev;
      }
      case ctl::kError:
        done_ = true;
        co_return ErrorFromInit(frame->payload);
      default:
        continue;  // a frame type this daemon does not know: skip it
    }
  }
}

}  // namespace bulkhead::core
