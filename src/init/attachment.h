// One kProcAttach connection (ctl_protocol.h): a background process's output from given
// offsets, optionally followed as it is produced, and control frames for the process.
// The Session owns the socket and its buffers; this decides what goes into them.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string_view>

#include "common/ctl_messages.h"
#include "common/result.h"
#include "init/background_process.h"
#include "init/frame_buffer.h"
#include "init/output_ring.h"

namespace bulkhead::init {

using AttachRequest = ctl::AttachMessage;

class Attachment {
 public:
  // Queues kAttached.
  Attachment(std::shared_ptr<BackgroundProcess> process, const AttachRequest& request, OutgoingFrames& out);
  ~Attachment();
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;

  // Whether the next control frame may be applied now: not while the process's stdin buffer
  // is full (the connection is then not read either).
  bool TakesFrames() const { return !process_->stdin_full(); }
  // Applies kStdin, kStdinClose, kSignal, kResize or kPing (answered with kPong in order).
  // Anything else, or a malformed payload, is an error that ends the connection.
  Status HandleFrame(uint8_t type, std::string_view payload, OutgoingFrames& out);

  // Queues output while `out` has room for a whole chunk, then kGap/kEnd/kExit as they apply.
  void Pump(OutgoingFrames& out);
  // The last frame (kEnd or kExit) is queued.
  bool finished() const { return finished_; }

 private:
  std::shared_ptr<BackgroundProcess> process_;
  bool output_;
  bool follow_;
  bool hold_;
  OutputRing::Cursor cursor_;
  // Without "follow", only the output that existed at attach time is sent (unless the process
  // is done: then all of it).
  uint64_t limit_[2];
  bool finished_ = false;
};

}  // namespace bulkhead::init
