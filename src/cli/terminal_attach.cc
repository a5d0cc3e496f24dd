#include "cli/terminal_attach.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <functional>

#include <nlohmann/json.hpp>

#include "cli/terminal.h"
#include "client/api_client.h"
#include "client/daemon_socket.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using boost::system::error_code;
using nlohmann::json;

constexpr size_t kStdinChunkBytes = 64 << 10;

Error ConnectionLost(const ServerAddress& address, const std::string& during, const error_code& ec) {
  return MakeError(ErrorCode::kUnavailable,
                   "connection to the daemon at " + address.ToUrl() + " failed while " + during + ": " +
                       ec.message(),
                   "connection_lost");
}

// One frame waiting to be sent; `after` runs once it is out (the stdin reader's turn).
struct OutgoingFrame {
  bool binary = false;
  std::string data;
  std::function<void()> after;
};

class AttachSession {
 public:
  AttachSession(const HttpClient& http, const AttachIo& io) : http_(http), io_(io) {}

  Status Connect(const std::string& target) {
    const ServerAddress& address = http_.address();
    BH_TRY(ConnectToDaemon(address, ws_.next_layer()));
    std::string api_key = http_.api_key();
    ws_.set_option(websocket::stream_base::decorator([api_key](websocket::request_type& request) {
      request.set(http::field::user_agent, "bulkhead-cli/" BULKHEAD_VERSION);
      if (!api_key.empty()) request.set(http::field::authorization, "Bearer " + api_key);
    }));
    websocket::response_type response;
    error_code ec;
    ws_.handshake(response, address.HostHeader(), target, ec);
    if (!ec) return {};
    int status = static_cast<int>(response.result_int());
    if (status != 0 && status != 101) {
      // The daemon refused the attach (unknown process, bad key...): its error says why.
      HttpResponse refusal;
      refusal.status = status;
      refusal.body = response.body();
      return ErrorFromResponse(refusal);
    }
    return ConnectionLost(address, "opening the terminal connection", ec);
  }

  Result<AttachResult> Run() {
    // asio makes the descriptors it polls non-blocking; give stdin back as it was.
    FileStatusFlagsGuard stdin_flags(io_.stdin_fd);
    FileStatusFlagsGuard stdout_flags(io_.stdout_fd);
    UniqueFd stdin_copy(::dup(io_.stdin_fd));
    if (!stdin_copy) return SystemError("dup stdin", errno);
    error_code ec;
    stdin_.assign(stdin_copy.release(), ec);
    if (ec) return MakeError(ErrorCode::kInternal, "reading stdin: " + ec.message(), "stdin_failed");

    signals_.add(SIGINT, ec);
    signals_.add(SIGQUIT, ec);
    signals_.add(SIGTERM, ec);
    signals_.add(SIGHUP, ec);
    if (io_.forward_window_size) signals_.add(SIGWINCH, ec);
    WaitForSignal();
    if (io_.forward_window_size) {
      // The window may have changed since the process was created with its size.
      if (auto size = QueryTerminalSize(io_.stdin_fd)) {
        Send(OutgoingFrame{false, ResizeMessage(size->cols, size->rows), nullptr});
      }
    }
    ReadFrame();
    ReadStdin();
    context_.run();
    stdin_.close(ec);
    if (failure_) return *failure_;
    return result_;
  }

 private:
  void Finish() {
    finished_ = true;
    context_.stop();
  }

  void Fail(Error error) {
    if (!failure_) failure_ = std::move(error);
    Finish();
  }

  void ReadFrame() {
    ws_.async_read(incoming_, [this](error_code ec, size_t) {
      if (finished_) return;
      if (ec) {
        // After the exit frame the daemon closes the connection: that is the normal end.
        if (result_.outcome || result_.interrupted_by != 0) return Finish();
        if (ec == websocket::error::closed) {
          return Fail(MakeError(ErrorCode::kUnavailable, "the daemon closed the terminal before the process exited",
                                "stream_ended"));
        }
        return Fail(ConnectionLost(http_.address(), "relaying the terminal", ec));
      }
      std::string_view bytes(static_cast<const char*>(incoming_.data().data()), incoming_.size());
      if (ws_.got_binary()) {
        if (Status written = WriteAllWaiting(io_.stdout_fd, bytes); !written.ok()) return Fail(written.error());
      } else {
        HandleControl(bytes);
      }
      incoming_.consume(incoming_.size());
      ReadFrame();
    });
  }

  // Text frames from the daemon: the exit status; anything else is for newer clients.
  void HandleControl(std::string_view text) {
    json message = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!message.is_object()) return;
    auto type = message.find("type");
    if (type == message.end() || !type->is_string()) return;
    if (*type == "exit") {
      CommandOutcome outcome;
      if (auto code = message.find("exit_code"); code != message.end() && code->is_number_integer()) {
        outcome.exit_code = code->get<int>();
      }
      if (auto signal = message.find("signal"); signal != message.end()) outcome.signal = SignalFromJson(*signal);
      if (auto timed_out = message.find("timed_out"); timed_out != message.end() && timed_out->is_boolean()) {
        outcome.timed_out = timed_out->get<bool>();
      }
      result_.outcome = outcome;
    } else if (*type == "error") {
      Fail(ErrorFromJson(message, ErrorCode::kInternal));
    }
  }

  void ReadStdin() {
    stdin_.async_read_some(asio::buffer(stdin_buffer_), [this](error_code ec, size_t n) {
      if (finished_ || closing_) return;
      if (ec || n == 0) {
        // EOF (or a hung-up terminal): the process sees the end of its input.
        Send(OutgoingFrame{false, StdinCloseMessage(), nullptr});
        return;
      }
      // The next read waits until these bytes are out: memory stays bounded.
      Send(OutgoingFrame{true, std::string(stdin_buffer_.data(), n), [this] { ReadStdin(); }});
    });
  }

  void WaitForSignal() {
    signals_.async_wait([this](error_code ec, int signal_number) {
      if (ec || finished_) return;
      if (signal_number == SIGWINCH) {
        if (auto size = QueryTerminalSize(io_.stdin_fd)) {
          Send(OutgoingFrame{false, ResizeMessage(size->cols, size->rows), nullptr});
        }
      } else if (signal_number == SIGINT || signal_number == SIGQUIT) {
        // Without raw mode the terminal turns Ctrl-C into a signal for us: pass it on.
        Send(OutgoingFrame{false, SignalMessage(signal_number == SIGINT ? "SIGINT" : "SIGQUIT"), nullptr});
      } else if (!closing_) {
        // bulkhead itself is asked to go: close the connection (what is queued goes first);
        // the caller decides what becomes of the process.
        result_.interrupted_by = signal_number;
        closing_ = true;
        SendNext();
      }
      WaitForSignal();
    });
  }

  void Send(OutgoingFrame frame) {
    if (closing_ && frame.after) return;
    outbox_.push_back(std::move(frame));
    SendNext();
  }

  void SendNext() {
    if (writing_ || finished_) return;
    if (outbox_.empty()) {
      if (closing_) {
        writing_ = true;
        ws_.async_close(websocket::close_code::normal, [this](error_code) { Finish(); });
      }
      return;
    }
    writing_ = true;
    ws_.binary(outbox_.front().binary);
    ws_.async_write(asio::buffer(outbox_.front().data), [this](error_code ec, size_t) {
      writing_ = false;
      if (finished_) return;
      if (ec) {
        if (result_.outcome) return Finish();  // the process is gone: its input no longer matters
        return Fail(ConnectionLost(http_.address(), "sending input", ec));
      }
      std::function<void()> after = std::move(outbox_.front().after);
      outbox_.pop_front();
      if (after) after();
      SendNext();
    });
  }

  const HttpClient& http_;
  const AttachIo& io_;
  asio::io_context context_;
  websocket::stream<asio::generic::stream_protocol::socket> ws_{context_};
  asio::posix::stream_descriptor stdin_{context_};
  asio::signal_set signals_{context_};
  beast::flat_buffer incoming_;
  std::array<char, kStdinChunkBytes> stdin_buffer_{};
  std::deque<OutgoingFrame> outbox_;
  bool writing_ = false;
  bool closing_ = false;
  bool finished_ = false;
  AttachResult result_;
  std::optional<Error> failure_;
};

}  // namespace

std::string ResizeMessage(int cols, int rows) {
  return json{{"type", "resize"}, {"cols", cols}, {"rows", rows}}.dump();
}

std::string SignalMessage(const std::string& signal_name) {
  return json{{"type", "signal"}, {"signal", signal_name}}.dump();
}

std::string StdinCloseMessage() { return json{{"type", "stdin_close"}}.dump(); }

Result<AttachResult> AttachToProcess(const HttpClient& http, const std::string& target, const AttachIo& io) {
  try {
    AttachSession session(http, io);
    BH_TRY(session.Connect(target));
    return session.Run();
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal, std::string("terminal connection failed: ") + e.what(), "client_error");
  }
}

}  // namespace bulkhead::cli
