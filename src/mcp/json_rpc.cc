#include "mcp/json_rpc.h"

#include <unistd.h>

#include <cerrno>

#include "client/exec_stream.h"

namespace bulkhead::mcp {

json ResultMessage(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json ErrorMessage(const json& id, int code, const std::string& message, json data) {
  json error = {{"code", code}, {"message", message}};
  if (!data.is_null()) error["data"] = std::move(data);
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(error)}};
}

IncomingMessage ClassifyMessage(const json& message) {
  IncomingMessage incoming;
  if (!message.is_object()) {
    incoming.problem = "a message must be a JSON object";
    return incoming;
  }
  auto id = message.find("id");
  const bool has_id = id != message.end();
  const bool id_usable = has_id && (id->is_string() || id->is_number_integer());
  if (id_usable) incoming.id = *id;

  auto version = message.find("jsonrpc");
  if (version == message.end() || *version != "2.0") {
    incoming.problem = "\"jsonrpc\" must be \"2.0\"";
    return incoming;
  }
  auto method = message.find("method");
  if (method == message.end()) {
    if (message.contains("result") || message.contains("error")) {
      incoming.kind = IncomingMessage::Kind::kResponse;
      return incoming;
    }
    incoming.problem = "a request needs a \"method\"";
    return incoming;
  }
  if (!method->is_string()) {
    incoming.problem = "\"method\" must be a string";
    return incoming;
  }
  incoming.method = method->get<std::string>();
  if (has_id && !id_usable) {
    incoming.problem = "\"id\" must be a string or an integer (MCP does not allow null)";
    return incoming;
  }
  auto params = message.find("params");
  if (params != message.end() && !params->is_object()) {
    incoming.problem = "\"params\" must be an object";
    return incoming;
  }
  if (params != message.end()) incoming.params = *params;
  incoming.kind = has_id ? IncomingMessage::Kind::kRequest : IncomingMessage::Kind::kNotification;
  return incoming;
}

bool LineReader::Fill() {
  if (ended_) return false;
  if (start_ > 0) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  char chunk[64 << 10];
  for (;;) {
    ssize_t n = ::read(fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ended_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

LineReader::Outcome LineReader::Next(std::string& line) {
  bool skipping = false;  // inside a line that is too long: drop it up to its "\n"
  size_t searched = start_;
  for (;;) {
    size_t newline = buffer_.find('\n', searched);
    if (newline != std::string::npos) {
      if (skipping || newline - start_ > max_line_bytes_) {
        start_ = newline + 1;
        return Outcome::kTooLong;
      }
      line.assign(buffer_, start_, newline - start_);
      start_ = newline + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return Outcome::kLine;
    }
    if (buffer_.size() - start_ > max_line_bytes_) {
      skipping = true;
      buffer_.clear();
      start_ = 0;
    }
    searched = buffer_.size();
    const size_t searched_from_start = searched - start_;
    if (!Fill()) {
      if (skipping) return Outcome::kTooLong;
      if (buffer_.size() > start_) {
        line.assign(buffer_, start_, std::string::npos);
        start_ = buffer_.size();
        return Outcome::kLine;
      }
      return Outcome::kEnd;
    }
    searched = start_ + searched_from_start;  // Fill moved the unread part to the front
  }
}

bool MessageWriter::Write(const json& message) {
  // Invalid UTF-8 becomes U+FFFD rather than an exception; dump() escapes newlines, so a
  // message is always one line.
  std::string line = message.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
  line += '\n';
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  if (!cli::WriteAll(fd_, line).ok()) closed_ = true;
  return !closed_;
}

bool MessageWriter::closed() {
  std::lock_guard lock(mutex_);
  return closed_;
}

}  // namespace bulkhead::mcp
