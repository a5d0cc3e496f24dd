// RFC 3339 timestamps in UTC, as the API writes them. Header-only: the static init uses it too.
#pragma once
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

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

}  // namespace bulkhead
