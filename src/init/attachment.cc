#include "init/attachment.h"

#include <limits>
#include <string>

#include "common/ctl_protocol.h"
#include "init/command_limits.h"
#include "init/exec_request.h"
#include "init/exit_report.h"

namespace bulkhead::init {
namespace {

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kInvalid, message); }

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

}  // namespace

Attachment::Attachment(std::shared_ptr<BackgroundProcess> process, const AttachRequest& request, OutgoingFrames& out)
    : process_(std::move(process)),
      output_(request.output),
      follow_(request.follow),
      hold_(request.output && request.follow && request.hold) {
  const OutputRing& ring = process_->output();
  cursor_ = ring.CursorAt(request.stdout_offset, request.stderr_offset);
  limit_[kStdoutStream] = follow_ ? kNoLimit : ring.total(kStdoutStream);
  limit_[kStderrStream] = follow_ ? kNoLimit : ring.total(kStderrStream);
  out.Append(ctl::kAttached,
             ctl::Encode(ctl::AttachedMessage{process_->Info(), {cursor_.offset[kStdoutStream], cursor_.offset[kStderrStream]}}));
  if (hold_) process_->AddHolder(&cursor_);
}

Attachment::~Attachment() {
  if (hold_) process_->RemoveHolder(&cursor_);
}

Status Attachment::HandleFrame(uint8_t type, std::string_view payload, OutgoingFrames& out) {
  switch (type) {
    case ctl::kStdin: process_->WriteStdin(payload); return {};
    case ctl::kStdinClose: process_->CloseStdin(); return {};
    case ctl::kSignal: {
      auto signal = ctl::DecodeSignal(payload);
      if (!signal.ok()) return signal.error();
      process_->Signal(signal->signal);
      return {};
    }
    case ctl::kResize: {
      auto size = ctl::DecodePtySize(payload);
      if (!size.ok()) return size.error();
      process_->Resize(*size);
      return {};
    }
    case ctl::kPing: out.Append(ctl::kPong, {}); return {};
    default: return Invalid("unexpected frame type " + std::to_string(type) + " on an attached connection");
  }
}

void Attachment::Pump(OutgoingFrames& out) {
  if (finished_) return;
  bool done = process_->done();
  if (!output_) {
    // A connection that only drives the process; with "follow" it still learns how it ended.
    if (follow_ && done) {
      out.Append(ctl::kExit, ctl::Encode(process_->Exit()));
      finished_ = true;
    }
    return;
  }
  // A finished process produces nothing more, so sending all it has ends too.
  if (done) limit_[kStdoutStream] = limit_[kStderrStream] = kNoLimit;

  const OutputRing& ring = process_->output();
  while (true) {
    if (out.size() + ctl::kHeaderSize + kOutputChunk > kOutgoingLimit) {
      if (hold_) process_->HolderMoved();
      return;  // resumed once sent
    }
    // Checked only when there is room to send: everything the ring dropped while this
    // follower's buffer was full becomes one gap, not one per dropped chunk.
    if (ring.SkipDropped(cursor_)) {
      out.Append(ctl::kGap, ctl::Encode(ctl::StreamOffsets{cursor_.offset[kStdoutStream], cursor_.offset[kStderrStream]}));
    }
    auto piece = ring.Read(cursor_, kOutputChunk, limit_);
    if (!piece) break;
    out.Append(piece->stream == kStdoutStream ? ctl::kStdout : ctl::kStderr, piece->data);
  }
  // This holder moved on: the process may be read again.
  if (hold_) process_->HolderMoved();
  // Everything up to the limit was sent.
  if (done) {
    out.Append(ctl::kExit, ctl::Encode(process_->Exit()));
    finished_ = true;
  } else if (!follow_) {
    out.Append(ctl::kEnd, {});
    finished_ = true;
  }
}

}  // namespace bulkhead::init
