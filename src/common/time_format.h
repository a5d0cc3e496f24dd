// RFC 3339 timestamps in UTC, as the API writes them. Header-only: the static init uses it too.
#pragma once
#include <time.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead {

// Now, in milliseconds since the Unix epoch.
inline int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "2026-11-29T21:00:00Z"
inline std::string Rfc3339(time_t seconds) {
  tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
  return text;
}

// "2026-11-29T21:00:00.123Z"
inline std::string Rfc3339Millis(const timespec& time) {
  tm utc{};
  ::gmtime_r(&time.tv_sec, &utc);
  char text[64];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, long(time.tv_nsec / 1000000));
  return text;
}

// "2026-11-29T21:00:00.123Z" for a time in Unix milliseconds.
inline std::string Rfc3339Millis(int64_t unix_ms) {
  const int64_t seconds = unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000;
  return Rfc3339Millis(timespec{static_cast<time_t>(seconds), static_cast<long>(unix_ms - seconds * 1000) * 1000000});
}

// "2024-05-01T12:00:00Z", with any fraction of a second and "Z" or a numeric offset ->
// milliseconds since the epoch (the fraction truncated to milliseconds).
inline std::optional<int64_t> ParseRfc3339Millis(std::string_view text) {
  // Exactly `count` digits at `pos`.
  auto digits = [&](size_t pos, size_t count) -> std::optional<int> {
    if (pos + count > text.size()) return std::nullopt;
    int value = 0;
    auto [end, ec] = std::from_chars(text.data() + pos, text.data() + pos + count, value);
    if (ec != std::errc() || end != text.data() + pos + count) return std::nullopt;
    return value;
  };
  // YYYY-MM-DDTHH:MM:SS
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != 't' && text[10] != ' ') ||
      text[13] != ':' || text[16] != ':') {
    return std::nullopt;
  }
  auto year = digits(0, 4), month = digits(5, 2), day = digits(8, 2);
  auto hour = digits(11, 2), minute = digits(14, 2), second = digits(17, 2);
  if (!year || !month || !day || !hour || !minute || !second) return std::nullopt;
  size_t pos = 19;
  int64_t millis = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t first = pos;
    for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos) {
      if (pos - first < 3) millis = millis * 10 + (text[pos] - '0');
    }
    if (pos == first) return std::nullopt;
    for (size_t n = pos - first; n < 3; ++n) millis *= 10;
  }
  int64_t offset_s = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos + 6 <= text.size() && (text[pos] == '+' || text[pos] == '-')) {  // +hh:mm
    auto offset_hours = digits(pos + 1, 2), offset_minutes = digits(pos + 4, 2);
    if (!offset_hours || !offset_minutes || text[pos + 3] != ':') return std::nullopt;
    offset_s = (*offset_hours * 3600 + *offset_minutes * 60) * (text[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  tm parts{};
  parts.tm_year = *year - 1900;
  parts.tm_mon = *month - 1;
  parts.tm_mday = *day;
  parts.tm_hour = *hour;
  parts.tm_min = *minute;
  parts.tm_sec = *second;
  return (static_cast<int64_t>(::timegm(&parts)) - offset_s) * 1000 + millis;
}

}  // namespace bulkhead
