// JSON-RPC 2.0 as MCP uses it: message shapes, error codes, and newline-delimited framing
// on stdin/stdout (one message per line, no embedded newlines).
#pragma once
#include <cstddef>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace bulkhead::mcp {

using nlohmann::json;

// JSON-RPC's own codes, and those MCP defines.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kUnsupportedProtocolVersion = -32022;  // 2026-07-28

json ResultMessage(const json& id, json result);
// `data` is left out when null.
json ErrorMessage(const json& id, int code, const std::string& message, json data = nullptr);

// One message from the client, sorted by shape.
struct IncomingMessage {
  enum class Kind { kRequest, kNotification, kResponse, kInvalid };
  Kind kind = Kind::kInvalid;
  json id;             // a request's id; for an invalid message, its id when one could be read
  std::string method;  // requests and notifications
  json params;         // an object, or null when absent
  std::string problem;  // kInvalid: what is wrong, for the error message
};

// Checks the JSON-RPC envelope: "jsonrpc": "2.0", a string method, a string or integer id
// (MCP forbids null), params an object when present.
IncomingMessage ClassifyMessage(const json& message);

// Reads newline-delimited messages from a file descriptor, in bounded memory.
class LineReader {
 public:
  LineReader(int fd, size_t max_line_bytes) : fd_(fd), max_line_bytes_(max_line_bytes) {}

  enum class Outcome { kLine, kTooLong, kEnd };
  // The next line without its "\n" (or "\r\n"). kTooLong: a line past the limit was
  // skipped whole. kEnd: end of input (a last line without "\n" is still returned first).
  Outcome Next(std::string& line);

 private:
  bool Fill();  // false at end of input or on a read error

  int fd_;
  size_t max_line_bytes_;
  std::string buffer_;
  size_t start_ = 0;  // where the unread part of buffer_ begins
  bool ended_ = false;
};

// Writes whole messages, one per line, from any thread.
class MessageWriter {
 public:
  explicit MessageWriter(int fd) : fd_(fd) {}

  // False once the output is closed (the client went away).
  bool Write(const json& message);
  bool closed();

 private:
  std::mutex mutex_;
  int fd_;
  bool closed_ = false;
};

}  // namespace bulkhead::mcp
