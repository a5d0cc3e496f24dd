#include "cli/output_format.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace bulkhead::cli {
namespace {

// Reads exactly `digits` digits at `pos`.
std::optional<int> Digits(std::string_view text, size_t pos, size_t digits) {
  if (pos + digits > text.size()) return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data() + pos, text.data() + pos + digits, value);
  if (ec != std::errc() || end != text.data() + pos + digits) return std::nullopt;
  return value;
}

}  // namespace

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (row.size() > widths.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::optional<int64_t> ParseRfc3339(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != 't' && text[10] != ' ') ||
      text[13] != ':' || text[16] != ':') {
    return std::nullopt;
  }
  auto year = Digits(text, 0, 4), month = Digits(text, 5, 2), day = Digits(text, 8, 2);
  auto hour = Digits(text, 11, 2), minute = Digits(text, 14, 2), second = Digits(text, 17, 2);
  if (!year || !month || !day || !hour || !minute || !second) return std::nullopt;
  size_t pos = 19;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
  }
  int64_t offset_s = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    auto offset_hours = Digits(text, pos + 1, 2), offset_minutes = Digits(text, pos + 4, 2);
    if (!offset_hours || !offset_minutes || text[pos + 3] != ':') return std::nullopt;
    offset_s = (*offset_hours * 3600 + *offset_minutes * 60) * (text[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  std::tm parts{};
  parts.tm_year = *year - 1900;
  parts.tm_mon = *month - 1;
  parts.tm_mday = *day;
  parts.tm_hour = *hour;
  parts.tm_min = *minute;
  parts.tm_sec = *second;
  return static_cast<int64_t>(timegm(&parts)) - offset_s;
}

std::string FormatDuration(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return std::to_string(seconds) + "s";
  if (seconds < 3600) return std::to_string(seconds / 60) + "m";
  if (seconds < 86400) return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

std::string DescribeCreated(const std::string& rfc3339, int64_t now) {
  if (rfc3339.empty()) return "-";
  auto when = ParseRfc3339(rfc3339);
  if (!when) return rfc3339;
  return FormatDuration(now - *when) + " ago";
}

std::string DescribeExpiry(const std::string& rfc3339, int64_t now) {
  if (rfc3339.empty()) return "never";
  auto when = ParseRfc3339(rfc3339);
  if (!when) return rfc3339;
  if (*when <= now) return "expired";
  return "in " + FormatDuration(*when - now);
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace bulkhead::cli
