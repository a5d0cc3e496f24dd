#include "core/exec_session.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
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

ErrorCode CodeFromInit(const std::string& code) {
  if (code == "not_found") return ErrorCode::kNotFound;
  if (code == "invalid_argument") return ErrorCode::kInvalid;
  return ErrorCode::kInternal;
}

}  // namespace

ExecSession::ExecSession(asio::local::stream_protocol::socket socket) : socket_(std::move(socket)) {}

ExecSession::~ExecSession() { Cancel(); }

void ExecSession::Cancel() {
  boost::system::error_code ec;
  if (!socket_.is_open()) return;
  // shutdown reaches the writer's duplicate descriptor too; init sees the end and kills the command.
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
}

asio::awaitable<Result<std::unique_ptr<ExecSession>>> ExecSession::Start(asio::any_io_executor executor,
                                                                          std::string ctl_path,
                                                                          std::string request_json,
                                                                          std::optional<std::string> stdin_data) {
  asio::local::stream_protocol::socket socket(executor);
  boost::system::error_code ec;
  co_await socket.async_connect(asio::local::stream_protocol::endpoint(ctl_path),
                                asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return LostInit(ec);
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
    uint8_t header[ctl::kHeaderSize];
    boost::system::error_code ec;
    co_await asio::async_read(socket_, asio::buffer(header), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      done_ = true;
      co_return LostInit(ec);
    }
    int64_t len = ctl::DecodePayloadLength(header);
    if (len < 0) {
      done_ = true;
      co_return MakeError(ErrorCode::kInternal, "bad frame from the sandbox's init", "sandbox_protocol_error");
    }
    std::string payload(static_cast<size_t>(len), '\0');
    co_await asio::async_read(socket_, asio::buffer(payload), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      done_ = true;
      co_return LostInit(ec);
    }
    ExecEvent ev;
    switch (header[4]) {
      case ctl::kStarted: {
        json j = json::parse(payload, nullptr, false);
        ev.type = ExecEvent::Type::kStarted;
        ev.pid = j.is_object() ? j.value("pid", 0) : 0;
        co_return ev;
      }
      case ctl::kStdout:
      case ctl::kStderr:
        ev.type = header[4] == ctl::kStdout ? ExecEvent::Type::kStdout : ExecEvent::Type::kStderr;
        ev.data = std::move(payload);
        co_await PaceOutput(budget_.get(), ev.data.size());
        co_return ev;
      case ctl::kExit: {
        done_ = true;
        json j = json::parse(payload, nullptr, false);
        ev.type = ExecEvent::Type::kExit;
        if (j.is_object()) {
          if (j.contains("exit_code") && j["exit_code"].is_number_integer()) ev.exit.exit_code = j["exit_code"].get<int>();
          if (j.contains("signal") && j["signal"].is_number_integer()) ev.exit.signal = j["signal"].get<int>();
          ev.exit.timed_out = j.value("timed_out", false);
          if (j.contains("duration_ms") && j["duration_ms"].is_number()) ev.exit.duration_ms = j["duration_ms"].get<double>();
        }
        co_return ev;
      }
      case ctl::kError: {
        done_ = true;
        json j = json::parse(payload, nullptr, false);
        std::string code = j.is_object() ? j.value("code", "internal") : "internal";
        std::string message = j.is_object() ? j.value("message", "command failed to start") : payload;
        co_return MakeError(CodeFromInit(code), message);
      }
      default:
        continue;  // a frame type this daemon does not know: skip it
    }
  }
}

}  // namespace bulkhead::core
