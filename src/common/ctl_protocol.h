// The control protocol between the daemon and a sandbox's init (PID 1).
//
// Transport: a SOCK_STREAM unix socket. The daemon creates and binds the listening
// socket on the host (<state>/sandboxes/<id>/ctl.sock) and hands it to init as fd 3;
// sandbox processes never see its path. One connection carries one command.
//
// Framing: every message is a frame
//     u32 length (little endian, counts the type byte and the payload) | u8 type | payload
// Payloads marked (json) are a UTF-8 JSON object; (bytes) are raw.
//
// daemon -> init
//   kExec      (json) {"argv": [..], "env": ["K=V", ..], "cwd": "/workspace",
//                      "user": "root" | "1000" | "1000:1000", "timeout_ms": 0,
//                      "stdin": true|false}
//              First frame of a connection. "env" is complete except that init fills
//              PATH, HOME, USER, LOGNAME and TERM where absent. If "stdin" is false the
//              command's stdin is /dev/null; otherwise kStdin frames follow, ended by
//              kStdinClose.
//   kStdin     (bytes) data for the command's stdin
//   kStdinClose ()     close the command's stdin
//   kSignal    (json) {"signal": 15} send a signal to the command's process group
//   kPing      ()     init answers kPong; used as a health check (first frame instead of kExec)
//
// init -> daemon
//   kStarted   (json) {"pid": 12}   the command was exec'd (pid as seen in the sandbox)
//   kStdout    (bytes)
//   kStderr    (bytes)
//   kExit      (json) {"exit_code": 0 | null, "signal": null | 9, "timed_out": false,
//                      "duration_ms": 3.1}
//              Last frame. Sent after the process exited and its stdout/stderr reached EOF,
//              or 100 ms after it exited if a descendant still holds them open.
//   kError     (json) {"code": "not_found" | "invalid_argument" | "internal", "message": ".."}
//              The command could not be started (cwd or user missing, bad request).
//              Last frame. A missing executable is NOT an error: it is kStarted followed by
//              kStderr "bulkhead: exec <argv0>: <strerror>" and kExit with exit_code 127
//              (126 for a permission problem), as a shell would report it.
//   kPong      ()
//
// If the daemon closes the connection before kExit, init kills the command's process group
// with SIGKILL: a client that goes away does not leave its command running.
// Init stops reading a command's output while the connection's send buffer is full, so a
// slow reader slows the writer instead of growing any buffer.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bulkhead::ctl {

enum FrameType : uint8_t {
  kExec = 1,
  kStdin = 2,
  kStdinClose = 3,
  kSignal = 4,
  kPing = 5,
  kStarted = 16,
  kStdout = 17,
  kStderr = 18,
  kExit = 19,
  kError = 20,
  kPong = 21,
};

// Frames larger than this are a protocol error; output is sent in chunks well below it.
constexpr uint32_t kMaxFrame = 1u << 20;
constexpr size_t kHeaderSize = 5;
// The fd on which init finds its listening control socket.
constexpr int kListenFd = 3;

inline void EncodeHeader(uint8_t* out, uint8_t type, uint32_t payload_len) {
  uint32_t len = payload_len + 1;
  out[0] = len & 0xff;
  out[1] = (len >> 8) & 0xff;
  out[2] = (len >> 16) & 0xff;
  out[3] = (len >> 24) & 0xff;
  out[4] = type;
}

// Returns the payload length from a 5-byte header, or -1 if the length is invalid.
inline int64_t DecodePayloadLength(const uint8_t* in) {
  uint32_t len = uint32_t(in[0]) | (uint32_t(in[1]) << 8) | (uint32_t(in[2]) << 16) |
                 (uint32_t(in[3]) << 24);
  if (len < 1 || len > kMaxFrame) return -1;
  return int64_t(len) - 1;
}

}  // namespace bulkhead::ctl
