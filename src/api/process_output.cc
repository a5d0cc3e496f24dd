#include "api/process_output.h"

#include <limits>

#include "api/json_output.h"

namespace bulkhead::api {

using nlohmann::json;

// The process's output is not capped here: the ring bounds it.
ProcessOutputCursor::Stream::Stream(const char* stream_type, uint64_t requested_offset)
    : type(stream_type), requested(requested_offset), encoder(stream_type, std::numeric_limits<int64_t>::max()) {}

void ProcessOutputCursor::Stream::Emit(std::optional<json> event, std::vector<json>& out) const {
  if (!event) return;
  (*event)["offset"] = received - encoder.held_back_bytes();
  out.push_back(std::move(*event));
}

void ProcessOutputCursor::Stream::SkipTo(uint64_t offset, std::vector<json>& out) {
  if (offset <= received) return;
  // The held-back start of a character whose rest was dropped: send it as it is.
  Emit(encoder.Flush(), out);
  out.push_back({{"type", "gap"}, {"stream", type}, {"from", received}, {"to", offset}});
  received = offset;
}

ProcessOutputCursor::ProcessOutputCursor(uint64_t requested_stdout, uint64_t requested_stderr)
    : stdout_("stdout", requested_stdout), stderr_("stderr", requested_stderr) {}

std::vector<json> ProcessOutputCursor::Start(uint64_t stdout_start, uint64_t stderr_start) {
  std::vector<json> events;
  for (auto [stream, start] : {std::pair{&stdout_, stdout_start}, std::pair{&stderr_, stderr_start}}) {
    // A start before the requested offset is the end of the output (asked beyond it): no gap.
    stream->received = std::min(start, stream->requested);
    stream->SkipTo(start, events);
    stream->received = start;
  }
  return events;
}

std::vector<json> ProcessOutputCursor::Skip(uint64_t stdout_offset, uint64_t stderr_offset) {
  std::vector<json> events;
  stdout_.SkipTo(stdout_offset, events);
  stderr_.SkipTo(stderr_offset, events);
  return events;
}

std::vector<json> ProcessOutputCursor::Output(OutputStream which, std::string_view bytes) {
  std::vector<json> events;
  Stream& stream = Of(which);
  stream.received += bytes.size();
  stream.Emit(stream.encoder.Push(bytes), events);
  return events;
}

std::vector<json> ProcessOutputCursor::Finish() {
  std::vector<json> events;
  stdout_.Emit(stdout_.encoder.Flush(), events);
  stderr_.Emit(stderr_.encoder.Flush(), events);
  return events;
}

json ProcessExitEvent(const ctl::ExitMessage& exit) {
  return {{"type", "exit"},
          {"exit_code", exit.exit_code ? json(*exit.exit_code) : json(nullptr)},
          {"signal", exit.signal ? json(SignalName(*exit.signal)) : json(nullptr)},
          {"timed_out", exit.timed_out},
          {"duration_ms", exit.duration_ms}};
}

}  // namespace bulkhead::api
