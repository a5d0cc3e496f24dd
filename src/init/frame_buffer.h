// Byte buffers for one control connection: frames going out, frames coming in.
// Both are bounded by their users (see session.cc); neither ever blocks.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace bulkhead::init {

// Frames waiting to be sent on a nonblocking socket.
class OutgoingFrames {
 public:
  size_t size() const { return data_.size() - sent_; }
  bool empty() const { return size() == 0; }

  void Append(uint8_t type, std::string_view payload);

  // Reads at most `max_payload` bytes from `fd` straight into a new frame of `type`, so output
  // is copied once. Returns read()'s result; on 0 or -1 no frame is added (errno kept).
  ssize_t AppendReadFrom(int fd, uint8_t type, size_t max_payload);

  // Sends what the socket takes now. Returns false if the peer is gone (EPIPE and friends).
  bool SendTo(int socket_fd);

 private:
  std::vector<uint8_t> data_;
  size_t sent_ = 0;  // bytes at the front of data_ already sent
};

// Incoming bytes cut into frames.
class IncomingFrames {
 public:
  struct Frame {
    uint8_t type;
    std::string_view payload;  // valid until the next Read call
  };
  enum class ReadResult { kData, kWouldBlock, kClosed };
  enum class NextResult { kFrame, kNeedMore, kMalformed };

  // One read() from the nonblocking socket.
  ReadResult Read(int socket_fd);
  // The next complete frame, if one is buffered.
  NextResult Next(Frame* frame);
  // Bytes of frames received but not handed out yet.
  size_t buffered() const { return data_.size() - consumed_; }

 private:
  std::vector<uint8_t> data_;
  size_t consumed_ = 0;  // bytes at the front of data_ already handed out
};

}  // namespace bulkhead::init
