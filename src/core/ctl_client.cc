#include "core/ctl_client.h"

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/ctl_messages.h"
#include "common/ctl_protocol.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::core {
namespace asio = boost::asio;

namespace {

Error LostInit(const boost::system::error_code& ec) {
  return MakeError(ErrorCode::kInternal, "lost the connection to the sandbox's init: " + ec.message(),
                   "sandbox_unreachable");
}

}  // namespace

asio::awaitable<Result<std::unique_ptr<CtlClient>>> CtlClient::Connect(
    asio::any_io_executor executor, std::shared_ptr<const runtime::InitDialer> init) {
  auto socket = co_await init->Dial(executor);
  if (!socket) co_return socket.error();
  co_return std::make_unique<CtlClient>(std::move(*socket));
}

asio::awaitable<Status> CtlClient::Send(uint8_t type, std::string_view payload) {
  if (payload.size() >= ctl::kMaxFrame) co_return MakeError(ErrorCode::kInternal, "control frame too large");
  uint8_t header[ctl::kHeaderSize];
  ctl::EncodeHeader(header, type, static_cast<uint32_t>(payload.size()));
  std::array<asio::const_buffer, 2> buffers = {asio::buffer(header), asio::buffer(payload.data(), payload.size())};
  boost::system::error_code ec;
  co_await asio::async_write(socket_, buffers, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return LostInit(ec);
  co_return Status{};
}

asio::awaitable<Result<CtlClient::Frame>> CtlClient::Receive() {
  uint8_t header[ctl::kHeaderSize];
  boost::system::error_code ec;
  co_await asio::async_read(socket_, asio::buffer(header), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return LostInit(ec);
  const int64_t length = ctl::DecodePayloadLength(header);
  if (length < 0) {
    Close();
    co_return InitProtocolError("a frame of a bad length");
  }
  Frame frame;
  frame.type = header[4];
  frame.payload.resize(static_cast<size_t>(length));
  co_await asio::async_read(socket_, asio::buffer(frame.payload), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return LostInit(ec);
  if (frame.type == ctl::kStdout || frame.type == ctl::kStderr) co_await PaceOutput(budget_.get(), frame.payload.size());
  co_return frame;
}

void CtlClient::Close() {
  if (!socket_.is_open()) return;
  boost::system::error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
}

Error InitProtocolError(std::string_view what) {
  return MakeError(ErrorCode::kInternal, fmt::format("unexpected answer from the sandbox's init: {}", what),
                   "sandbox_protocol_error");
}

Result<nlohmann::json> ParseInitObject(std::string_view payload, std::string_view frame) {
  nlohmann::json doc = ParseBoundedJson(payload);
  if (!doc.is_object()) return InitProtocolError(fmt::format("{} is not a JSON object", frame));
  return doc;
}

std::optional<int> InitPid(const nlohmann::json& object) {
  if (!object.is_object()) return std::nullopt;
  auto pid = object.find("pid");
  if (pid == object.end() || !pid->is_number_integer()) return std::nullopt;
  const int64_t value = pid->get<int64_t>();
  if (value < 1 || value > INT32_MAX) return std::nullopt;
  return static_cast<int>(value);
}

Result<CtlClient::Frame> CallInitBlocking(const runtime::InitDialer& init, uint8_t type, std::string_view payload,
                                          std::chrono::milliseconds timeout, uint8_t until) {
  std::optional<Result<CtlClient::Frame>> answer;  // outlives io: an unfinished call is dropped with it
  asio::io_context io;
  auto call = [&]() -> asio::awaitable<void> {
    auto socket = co_await init.Dial(io.get_executor());
    if (!socket.ok()) {
      answer = socket.error();
      co_return;
    }
    auto client = std::make_unique<CtlClient>(std::move(*socket));
    if (Status sent = co_await client->Send(type, payload); !sent.ok()) {
      answer = sent.error();
      co_return;
    }
    while (true) {
      Result<CtlClient::Frame> frame = co_await client->Receive();
      if (frame.ok() && frame->type == ctl::kError) {
        answer = ErrorFromInit(frame->payload);
      } else if (!frame.ok() || until == 0 || frame->type == until) {
        answer = std::move(frame);
      } else {
        continue;  // (a frame before the one asked for)
      }
      co_return;
    }
  };
  asio::co_spawn(io, call, asio::detached);
  io.run_for(timeout);
  if (!answer)
    return MakeError(ErrorCode::kInternal, "the sandbox's init did not answer in time", "sandbox_unreachable");
  return std::move(*answer);
}

Error ErrorFromInit(std::string_view payload) {
  Result<ctl::ErrorMessage> error = ctl::DecodeError(payload);
  if (!error.ok()) return MakeError(ErrorCode::kInternal, std::string(payload.substr(0, 1000)));
  return MakeError(ctl::CodeOf(error->code), error->message.empty() ? "the sandbox's init failed" : error->message);
}

}  // namespace bulkhead::core
