#include "e2b/multipart.h"

#include <map>

#include <fmt/format.h>

#include "common/ascii.h"

namespace bulkhead::e2b {

namespace {

// A boundary longer than RFC 2046's 70 bytes is accepted up to this (lenient, still bounded).
constexpr size_t kMaxBoundaryBytes = 200;
// Whitespace allowed between a delimiter and its line end ("transport padding").
constexpr size_t kMaxPaddingBytes = 256;

Error Bad(std::string message) { return MakeError(ErrorCode::kBadRequest, std::move(message)); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A header value "type; key=value; key="quoted \" value"": the type (lowercased) and the
// parameters (keys lowercased). 400 for an unterminated quote or a parameter given twice.
struct HeaderValue {
  std::string type;
  std::map<std::string, std::string> params;
};

Result<HeaderValue> ParseHeaderValue(std::string_view text, std::string_view header) {
  HeaderValue value;
  const size_t semicolon = text.find(';');
  value.type = AsciiLower(TrimBlanks(text.substr(0, semicolon)));
  if (semicolon == std::string_view::npos) return value;
  text.remove_prefix(semicolon + 1);
  for (;;) {
    text = TrimBlanks(text);
    if (text.empty()) return value;
    if (text.front() == ';') {  // an empty parameter ("a;;b"): skipped
      text.remove_prefix(1);
      continue;
    }
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) return Bad(fmt::format("a parameter of {} has no value", header));
    const std::string key = AsciiLower(TrimBlanks(text.substr(0, equals)));
    if (key.empty() || key.find_first_of(" \t\";") != std::string::npos) {
      return Bad(fmt::format("{} has a malformed parameter name", header));
    }
    text.remove_prefix(equals + 1);
    text = TrimBlanks(text);
    std::string parameter;
    if (!text.empty() && text.front() == '"') {
      size_t i = 1;
      bool closed = false;
      for (; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) {
          parameter += text[++i];
        } else if (text[i] == '"') {
          closed = true;
          break;
        } else {
          parameter += text[i];
        }
      }
      if (!closed) return Bad(fmt::format("{} has an unterminated quoted string", header));
      text.remove_prefix(i + 1);
      text = TrimBlanks(text);
      if (!text.empty() && text.front() != ';') return Bad(fmt::format("{} has text after a quoted string", header));
    } else {
      const size_t end = text.find(';');
      parameter = std::string(TrimBlanks(text.substr(0, end)));
      text = end == std::string_view::npos ? std::string_view() : text.substr(end);
    }
    if (!text.empty()) text.remove_prefix(1);  // the ';'
    if (!value.params.emplace(key, std::move(parameter)).second) {
      return Bad(fmt::format("{} gives the parameter {} twice", header, key));
    }
  }
}

// RFC 5987's ext-value ("UTF-8''a%2Fb.txt"), as filename* carries it.
Result<std::string> DecodeExtValue(std::string_view text) {
  const size_t first = text.find('\'');
  const size_t second = first == std::string_view::npos ? first : text.find('\'', first + 1);
  if (second == std::string_view::npos) return Bad("filename* is not charset'language'value");
  const std::string charset = AsciiLower(text.substr(0, first));
  if (charset != "utf-8" && charset != "us-ascii") return Bad("filename* must be UTF-8");
  text.remove_prefix(second + 1);
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int high = i + 2 < text.size() ? HexValue(text[i + 1]) : -1;
    const int low = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
    if (high < 0 || low < 0) return Bad("filename* has a malformed %-escape");
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

}  // namespace

Result<std::string> MultipartBoundary(std::string_view content_type) {
  Result<HeaderValue> value = ParseHeaderValue(content_type, "Content-Type");
  if (!value.ok()) return value.error();
  if (!value->type.starts_with("multipart/")) {
    return Bad(fmt::format("the body must be multipart/form-data or application/octet-stream, not {}",
                           content_type.empty() ? "untyped" : content_type));
  }
  const auto found = value->params.find("boundary");
  if (found == value->params.end() || found->second.empty()) return Bad("the multipart Content-Type has no boundary");
  const std::string& boundary = found->second;
  if (boundary.size() > kMaxBoundaryBytes) return Bad("the multipart boundary is too long");
  for (char c : boundary) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return Bad("the multipart boundary has a control character");
  }
  return boundary;
}

MultipartParser::MultipartParser(std::string boundary) : delimiter_("\r\n--" + boundary) {
  // The first delimiter may open the body: seen as if a line break came before it.
  pending_ = "\r\n";
}

Status MultipartParser::Fail(std::string message) {
  state_ = State::kFailed;
  pending_.clear();
  return Bad(std::move(message));
}

Status MultipartParser::ParseHeaderLine(std::string_view line) {
  if (++header_lines_ > kMaxHeaderLines) return Fail("a multipart part has too many header lines");
  if (line.front() == ' ' || line.front() == '\t') return Fail("folded multipart header lines are not accepted");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return Fail("a multipart part has a malformed header line");
  const std::string name = AsciiLower(line.substr(0, colon));
  if (name.find_first_of(" \t") != std::string::npos) return Fail("a multipart header name contains whitespace");
  const std::string_view value = TrimBlanks(line.substr(colon + 1));
  if (name == "content-disposition") {
    if (has_disposition_) return Fail("a multipart part has two Content-Disposition headers");
    has_disposition_ = true;
    Result<HeaderValue> parsed = ParseHeaderValue(value, "Content-Disposition");
    if (!parsed.ok()) return Fail(parsed.error().message);
    if (auto found = parsed->params.find("name"); found != parsed->params.end()) part_.name = found->second;
    if (auto found = parsed->params.find("filename*"); found != parsed->params.end()) {
      Result<std::string> decoded = DecodeExtValue(found->second);
      if (!decoded.ok()) return Fail(decoded.error().message);
      part_.filename = std::move(*decoded);
    } else if (auto plain = parsed->params.find("filename"); plain != parsed->params.end()) {
      part_.filename = plain->second;
    }
  } else if (name == "content-type") {
    part_.content_type = std::string(value);
  }
  return {};
}

Status MultipartParser::Feed(std::string_view piece, std::vector<Event>& events) {
  if (state_ == State::kFailed) return Bad("the multipart body is malformed");
  if (state_ == State::kEpilogue) return {};
  pending_.append(piece);
  const size_t keep = delimiter_.size() - 1;  // bytes that may be the start of a delimiter
  size_t pos = 0;
  bool more = true;
  while (more) {
    switch (state_) {
      case State::kPreamble: {
        const size_t found = pending_.find(delimiter_, pos);
        if (found == std::string::npos) {
          if (pending_.size() > keep) pos = std::max(pos, pending_.size() - keep);
          more = false;
          break;
        }
        pos = found + delimiter_.size();
        state_ = State::kAfterDelimiter;
        break;
      }
      case State::kAfterDelimiter: {
        size_t i = pos;
        while (i < pending_.size() && (pending_[i] == ' ' || pending_[i] == '\t')) ++i;
        if (i - pos > kMaxPaddingBytes) return Fail("a multipart delimiter line is too long");
        if (pending_.size() - i < 2) {
          more = false;
          break;
        }
        if (i == pos && pending_.compare(i, 2, "--") == 0) {
          state_ = State::kEpilogue;
          pos = pending_.size();
          more = false;
          break;
        }
        if (pending_.compare(i, 2, "\r\n") != 0) return Fail("a multipart delimiter is not followed by a line break");
        pos = i + 2;
        state_ = State::kHeaders;
        part_ = MultipartPart{};
        has_disposition_ = false;
        header_bytes_ = 0;
        header_lines_ = 0;
        break;
      }
      case State::kHeaders: {
        const size_t end = pending_.find("\r\n", pos);
        if (end == std::string::npos) {
          if (header_bytes_ + (pending_.size() - pos) > kMaxHeaderBytes) return Fail("a multipart part's header is too long");
          more = false;
          break;
        }
        header_bytes_ += end - pos + 2;
        if (header_bytes_ > kMaxHeaderBytes) return Fail("a multipart part's header is too long");
        const std::string_view line = std::string_view(pending_).substr(pos, end - pos);
        pos = end + 2;
        if (line.empty()) {
          events.push_back(Event{Event::kPartBegin, std::move(part_), {}});
          part_ = MultipartPart{};
          state_ = State::kBody;
          break;
        }
        if (Status parsed = ParseHeaderLine(line); !parsed.ok()) return parsed;
        break;
      }
      case State::kBody: {
        const size_t found = pending_.find(delimiter_, pos);
        if (found == std::string::npos) {
          if (pending_.size() - pos > keep) {
            const size_t end = pending_.size() - keep;
            events.push_back(Event{Event::kData, {}, pending_.substr(pos, end - pos)});
            pos = end;
          }
          more = false;
          break;
        }
        if (found > pos) events.push_back(Event{Event::kData, {}, pending_.substr(pos, found - pos)});
        events.push_back(Event{Event::kPartEnd, {}, {}});
        pos = found + delimiter_.size();
        state_ = State::kAfterDelimiter;
        break;
      }
      case State::kEpilogue:
      case State::kFailed:
        pos = pending_.size();
        more = false;
        break;
    }
  }
  pending_.erase(0, pos);
  return {};
}

Status MultipartParser::Finish() const {
  switch (state_) {
    case State::kEpilogue: return {};
    case State::kPreamble: return Bad("the multipart body has no delimiter (is the boundary right?)");
    case State::kFailed: return Bad("the multipart body is malformed");
    default: return Bad("the multipart body ends before its closing delimiter");
  }
}

}  // namespace bulkhead::e2b
