#include "init/frame_buffer.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/ctl_protocol.h"

namespace bulkhead::init {
namespace {

constexpr size_t kSocketReadChunk = 64 * 1024;

}  // namespace

void OutgoingFrames::Append(uint8_t type, std::string_view payload) {
  size_t at = data_.size();
  data_.resize(at + ctl::kHeaderSize + payload.size());
  ctl::EncodeHeader(&data_[at], type, uint32_t(payload.size()));
  if (!payload.empty()) std::memcpy(&data_[at + ctl::kHeaderSize], payload.data(), payload.size());
}

ssize_t OutgoingFrames::AppendReadFrom(int fd, uint8_t type, size_t max_payload) {
  size_t at = data_.size();
  data_.resize(at + ctl::kHeaderSize + max_payload);
  ssize_t n = ::read(fd, &data_[at + ctl::kHeaderSize], max_payload);
  if (n <= 0) {
    int saved = errno;
    data_.resize(at);
    errno = saved;
    return n;
  }
  data_.resize(at + ctl::kHeaderSize + size_t(n));
  ctl::EncodeHeader(&data_[at], type, uint32_t(n));
  return n;
}

bool OutgoingFrames::SendTo(int socket_fd) {
  while (sent_ < data_.size()) {
    ssize_t n = ::send(socket_fd, &data_[sent_], data_.size() - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    sent_ += size_t(n);
  }
  // Keep the buffer from creeping: drop what was sent once it is a large part of it.
  if (sent_ == data_.size()) {
    data_.clear();
    sent_ = 0;
  } else if (sent_ >= kSocketReadChunk) {
    data_.erase(data_.begin(), data_.begin() + ptrdiff_t(sent_));
    sent_ = 0;
  }
  return true;
}

IncomingFrames::ReadResult IncomingFrames::Read(int socket_fd) {
  if (consumed_ > 0) {
    data_.erase(data_.begin(), data_.begin() + ptrdiff_t(consumed_));
    consumed_ = 0;
  }
  size_t at = data_.size();
  data_.resize(at + kSocketReadChunk);
  ssize_t n;
  do {
    n = ::recv(socket_fd, &data_[at], kSocketReadChunk, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  data_.resize(at + (n > 0 ? size_t(n) : 0));
  if (n > 0) return ReadResult::kData;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadResult::kWouldBlock;
  return ReadResult::kClosed;  // EOF or a socket error: the peer is gone either way
}

IncomingFrames::NextResult IncomingFrames::Next(Frame* frame) {
  size_t available = data_.size() - consumed_;
  if (available < ctl::kHeaderSize) return NextResult::kNeedMore;
  const uint8_t* header = &data_[consumed_];
  int64_t payload_len = ctl::DecodePayloadLength(header);
  if (payload_len < 0) return NextResult::kMalformed;
  if (available < ctl::kHeaderSize + size_t(payload_len)) return NextResult::kNeedMore;
  frame->type = header[4];
  frame->payload = std::string_view(reinterpret_cast<const char*>(header + ctl::kHeaderSize),
                                    size_t(payload_len));
  consumed_ += ctl::kHeaderSize + size_t(payload_len);
  return NextResult::kFrame;
}

}  // namespace bulkhead::init
