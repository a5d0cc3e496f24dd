#include "cli/output_format.h"

#include <algorithm>
#include <cstdio>

#include "common/time_format.h"

namespace bulkhead::cli {

std::string StringField(const nlohmann::json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

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
  const std::optional<int64_t> millis = ParseRfc3339Millis(text);
  if (!millis) return std::nullopt;
  return *millis >= 0 ? *millis / 1000 : (*millis - 999) / 1000;
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
