#include "http/request_target.h"

namespace bulkhead::api {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int hi = HexValue(text[i + 1]);
      const int lo = HexValue(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<RequestTarget> ParseTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') return std::nullopt;
  RequestTarget result;
  const size_t question = target.find('?');
  result.path = std::string(target.substr(0, question));
  if (question == std::string_view::npos) return result;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t equals = pair.find('=');
    auto key = PercentDecode(pair.substr(0, equals), true);
    auto value = PercentDecode(
        equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1), true);
    if (!key || !value) return std::nullopt;
    result.query.emplace_back(std::move(*key), std::move(*value));
  }
  return result;
}

const std::string* QueryParam(const QueryParams& query, std::string_view name) {
  for (const auto& [key, value] : query) {
    if (key == name) return &value;
  }
  return nullptr;
}

Status ReadBoolParam(const QueryParams& query, std::string_view name, bool& out) {
  const std::string* value = QueryParam(query, name);
  if (value == nullptr) return {};
  if (*value == "true" || *value == "1") {
    out = true;
  } else if (*value == "false" || *value == "0") {
    out = false;
  } else {
    return MakeError(ErrorCode::kInvalid, std::string(name) + " must be true or false");
  }
  return {};
}

}  // namespace bulkhead::api
