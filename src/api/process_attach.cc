#include "api/process_attach.h"

#include <algorithm>
#include <memory>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/json_output.h"
#include "api/process_output.h"
#include "common/bounded_json.h"
#include "common/ctl_protocol.h"
#include "service/init_process.h"
#include "service/process_request.h"
#include "service/signal_names.h"
#include "service/validate.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
namespace websocket = boost::beast::websocket;
using boost::system::error_code;
using nlohmann::json;

// One client message (stdin bytes or a control message) is at most this large.
constexpr size_t kMaxClientMessage = 1024 * 1024;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// One attach: the WebSocket, the attach connection to init and what its two directions
// share. Both directions run on the connection's strand, so no locks.
struct AttachSession {
  AttachSession(HttpStream& stream, std::unique_ptr<core::CtlClient> init_client, bool pty)
      : ws(stream),
        init(std::move(init_client)),
        has_pty(pty),
        write_turn(stream.get_executor()),
        reader_done(stream.get_executor()) {}

  websocket::stream<HttpStream&> ws;
  std::unique_ptr<core::CtlClient> init;
  bool has_pty;

  // The WebSocket takes one write at a time; output, the exit and replies to bad messages
  // come from both directions. `writing` is the turn; waiters sleep on `write_turn`, which
  // is cancelled when a turn ends. (Two coroutines: at most one waits.)
  bool writing = false;
  asio::steady_timer write_turn;

  bool client_done = false;     // the client's side ended (closed or gone)
  bool reader_running = true;
  asio::steady_timer reader_done;  // cancelled when the client's direction ends
};

asio::awaitable<void> TakeWriteTurn(AttachSession& session) {
  while (session.writing) {
    session.write_turn.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await session.write_turn.async_wait(Redirect(ec));
  }
  session.writing = true;
}

void EndWriteTurn(AttachSession& session) {
  session.writing = false;
  session.write_turn.cancel();
}

// Sends one message; false once the client is gone.
asio::awaitable<bool> Write(AttachSession& session, bool binary, std::string_view data) {
  co_await TakeWriteTurn(session);
  session.ws.binary(binary);
  error_code ec;
  co_await session.ws.async_write(asio::buffer(data.data(), data.size()), Redirect(ec));
  EndWriteTurn(session);
  co_return !ec;
}

asio::awaitable<void> Close(AttachSession& session, websocket::close_code code, std::string_view reason) {
  co_await TakeWriteTurn(session);
  error_code ec;
  if (session.ws.is_open()) {
    // A close reason is at most 123 bytes.
    websocket::close_reason why(code, boost::beast::string_view(reason.data(), std::min<size_t>(reason.size(), 123)));
    co_await session.ws.async_close(why, Redirect(ec));
  }
  EndWriteTurn(session);
}

asio::awaitable<void> ReplyError(AttachSession& session, const Error& error) {
  const json message = {{"type", "error"}, {"code", ErrorCodeOf(error)}, {"message", error.message}};
  const std::string text = DumpJson(message);
  co_await Write(session, /*binary=*/false, text);
}

// A text frame from the client: one control message, applied on the attach connection.
asio::awaitable<Status> ApplyControl(AttachSession& session, std::string_view text) {
  Result<json> parsed = ParseJsonObject(text);
  if (!parsed.ok()) co_return parsed.error();
  const json& message = *parsed;
  auto type_field = message.find("type");
  const std::string type = type_field != message.end() && type_field->is_string() ? type_field->get<std::string>() : "";
  if (type == "resize") {
    Result<PtySize> size = ParseResize(message);
    if (!size.ok()) co_return size.error();
    if (!session.has_pty) co_return MakeError(ErrorCode::kConflict, "the process has no pty", "not_a_pty");
    const std::string payload = json{{"cols", size->cols}, {"rows", size->rows}}.dump();
    co_return co_await session.init->Send(ctl::kResize, payload);
  }
  if (type == "signal") {
    auto field = message.find("signal");
    Result<int> signal = ParseSignal(field == message.end() ? json(nullptr) : *field, "signal");
    if (!signal.ok()) co_return signal.error();
    const std::string payload = json{{"signal", *signal}}.dump();
    co_return co_await session.init->Send(ctl::kSignal, payload);
  }
  if (type == "stdin_close") co_return co_await session.init->Send(ctl::kStdinClose, {});
  co_return MakeError(ErrorCode::kInvalid, "type must be one of resize, signal, stdin_close");
}

// Client -> process: binary frames are stdin, text frames control messages.
asio::awaitable<void> ForwardInput(AttachSession& session) {
  boost::beast::flat_buffer buffer;
  for (;;) {
    buffer.clear();
    error_code ec;
    co_await session.ws.async_read(buffer, Redirect(ec));
    if (ec) break;  // closed by either side, or the client is gone
    const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
    if (session.ws.got_binary()) {
      // Backpressure: the next message is read once init took this one.
      if (!(co_await SendStdin(*session.init, data)).ok()) break;  // init lost: the output side closes
      continue;
    }
    Status applied = co_await ApplyControl(session, data);
    if (!applied.ok()) {
      if (applied.error().detail_code == "sandbox_unreachable") break;
      co_await ReplyError(session, applied.error());
    }
  }
  session.client_done = true;
  // The output side may wait on init: end that wait (the process is not affected).
  session.init->Close();
}

asio::awaitable<void> RunForwardInput(std::shared_ptr<AttachSession> session) {
  try {
    co_await ForwardInput(*session);
  } catch (const std::exception& e) {
    spdlog::error("attach: unexpected exception reading the client: {}", e.what());
    session->init->Close();
  }
  session->reader_running = false;
  session->reader_done.cancel();
}

// Process -> client: output as binary frames; the exit as a text frame, then a normal close.
asio::awaitable<void> ForwardOutput(AttachSession& session) {
  for (;;) {
    Result<core::CtlClient::Frame> frame = co_await session.init->Receive();
    if (!frame.ok()) {
      if (!session.client_done) co_await Close(session, websocket::close_code::going_away, "lost the sandbox's init");
      co_return;
    }
    switch (frame->type) {
      case ctl::kStdout:
      case ctl::kStderr:
        // Backpressure: the next frame is read from init once the client took this one.
        if (!co_await Write(session, /*binary=*/true, frame->payload)) co_return;
        break;
      case ctl::kExit: {
        const std::string exit = DumpJson(ProcessExitEvent(ctl::ReadExit(frame->payload)));
        if (co_await Write(session, /*binary=*/false, exit)) {
          co_await Close(session, websocket::close_code::normal, "the process exited");
        }
        co_return;
      }
      case ctl::kError: {
        const Error error = core::ErrorFromInit(frame->payload);
        co_await Close(session, websocket::close_code::internal_error, error.message);
        co_return;
      }
      default:
        break;  // kGap: a byte stream has no place to say so; the output goes on
    }
  }
}

}  // namespace

asio::awaitable<void> ServeProcessAttach(HttpExchange& exchange, core::SandboxManager& manager,
                                         const std::string& sandbox_id, const std::string& pid,
                                         const QueryParams& query) {
  if (!websocket::is_upgrade(exchange.request())) {
    co_return co_await exchange.SendError(MakeError(
        ErrorCode::kBadRequest, "attach is a WebSocket: send an upgrade request (Connection: Upgrade, Upgrade: websocket)"));
  }
  Result<OutputQuery> wanted = ParseOutputQuery(query);
  if (!wanted.ok()) co_return co_await exchange.SendError(wanted.error());
  auto executor = co_await asio::this_coro::executor;
  AttachRequest request;
  request.output = true;
  request.follow = true;
  request.stdout_offset = wanted->stdout_offset;
  request.stderr_offset = wanted->stderr_offset;
  Result<ProcessAttachment> attached = co_await AttachProcess(manager, executor, sandbox_id, pid, request);
  if (!attached.ok()) co_return co_await exchange.SendError(attached.error());
  const auto pty = attached->process.find("pty");
  const bool has_pty = pty != attached->process.end() && pty->is_object();

  auto session = std::make_shared<AttachSession>(exchange.stream(), std::move(attached->client), has_pty);
  // The WebSocket keeps its own time (handshake limit, idle pings); the HTTP deadline would
  // cut a long attach.
  exchange.stream().expires_never();
  session->ws.set_option(websocket::stream_base::timeout::suggested(boost::beast::role_type::server));
  session->ws.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& response) { response.set(http::field::server, "bulkhead/" BULKHEAD_VERSION); }));
  session->ws.read_message_max(kMaxClientMessage);
  error_code ec;
  co_await session->ws.async_accept(exchange.request(), Redirect(ec));
  // Beast answered the handshake itself (101, or an error status for a bad handshake).
  exchange.HandOver(ec ? 400 : 101);
  if (ec) co_return;

  asio::co_spawn(executor, RunForwardInput(session), asio::detached);
  co_await ForwardOutput(*session);
  // The output side is done (and the WebSocket closed, or the client gone): make sure the
  // input side ends too, then give the connection back.
  session->init->Close();
  error_code ignored;
  boost::beast::get_lowest_layer(session->ws).socket().cancel(ignored);
  while (session->reader_running) {
    session->reader_done.expires_at(asio::steady_timer::time_point::max());
    co_await session->reader_done.async_wait(Redirect(ignored));
  }
}

}  // namespace bulkhead::api
