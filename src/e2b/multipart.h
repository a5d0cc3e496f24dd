// A streaming multipart/form-data parser (RFC 7578 over RFC 2046's multipart syntax) for
// POST /files: it takes the body in pieces of any size, split anywhere, and answers what it
// found in them as events, holding back only a delimiter's length of bytes (and a part's
// header while it is read). So a 100 MiB upload never sits in memory.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bulkhead::e2b {

// The boundary parameter of a "multipart/form-data; boundary=..." Content-Type (quoted or
// not). 400 when the type is not multipart or the boundary is missing or not 1..70 bytes.
Result<std::string> MultipartBoundary(std::string_view content_type);

struct MultipartPart {
  std::string name;                     // Content-Disposition's name
  std::optional<std::string> filename;  // its filename, raw: a path may contain '/'
  std::string content_type;
};

class MultipartParser {
 public:
  // A part's header is at most this long and has at most this many lines: more is 400.
  static constexpr size_t kMaxHeaderBytes = 16 * 1024;
  static constexpr size_t kMaxHeaderLines = 32;

  struct Event {
    enum Kind { kPartBegin, kData, kPartEnd };
    Kind kind;
    MultipartPart part;  // kPartBegin
    std::string data;    // kData
  };

  explicit MultipartParser(std::string boundary);

  // The events of the next piece of the body, appended to `events` (kData events carry at
  // most the piece's size). A malformed body is 400 (kBadRequest); the parser is then spent.
  Status Feed(std::string_view piece, std::vector<Event>& events);
  // At the end of the body: 400 unless the closing delimiter was seen.
  Status Finish() const;
  // The closing delimiter was seen (what follows it is ignored).
  bool done() const { return state_ == State::kEpilogue; }

 private:
  enum class State { kPreamble, kAfterDelimiter, kHeaders, kBody, kEpilogue, kFailed };

  Status ParseHeaderLine(std::string_view line);
  Status Fail(std::string message);

  std::string delimiter_;  // "\r\n--" + boundary
  State state_ = State::kPreamble;
  std::string pending_;    // bytes not yet consumed
  MultipartPart part_;     // the part whose header is being read
  bool has_disposition_ = false;
  size_t header_bytes_ = 0;
  size_t header_lines_ = 0;
};

}  // namespace bulkhead::e2b
