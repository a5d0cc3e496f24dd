#include "core/ctl_client.h"

#include <boost/asio/buffer.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

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

asio::awaitable<Result<std::unique_ptr<CtlClient>>> CtlClient::Connect(asio::any_io_executor executor,
                                                                       std::string ctl_path) {
  asio::local::stream_protocol::socket socket(executor);
  boost::system::error_code ec;
  co_await socket.async_connect(asio::local::stream_protocol::endpoint(ctl_path),
                                asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return LostInit(ec);
  co_return std::make_unique<CtlClient>(std::move(socket));
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
    co_return MakeError(ErrorCode::kInternal, "bad frame from the sandbox's init", "sandbox_protocol_error");
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

Error ErrorFromInit(std::string_view payload) {
  const nlohmann::json doc = nlohmann::json::parse(payload, nullptr, false);
  const std::string code = doc.is_object() ? doc.value("code", "internal") : "internal";
  const std::string message = doc.is_object() ? doc.value("message", "the sandbox's init failed") : std::string(payload);
  if (code == "not_found") return MakeError(ErrorCode::kNotFound, message);
  if (code == "invalid_argument") return MakeError(ErrorCode::kInvalid, message);
  return MakeError(ErrorCode::kInternal, message);
}

}  // namespace bulkhead::core
