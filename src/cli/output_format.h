// How list commands show things to people: aligned tables, ages, sizes.
#pragma once
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace bulkhead::cli {

// Rows of cells (the first row is the header) as text with columns aligned by spaces.
// A string field of a JSON object the daemon answered; "" when absent or not a string.
std::string StringField(const nlohmann::json& object, const char* field);

std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// "2024-05-01T12:00:00Z" (fraction and numeric offset allowed) -> seconds since the epoch.
std::optional<int64_t> ParseRfc3339(std::string_view text);

// 42 -> "42s", 300 -> "5m", 7200 -> "2h", 259200 -> "3d".
std::string FormatDuration(int64_t seconds);

// "5m ago" for a past time, the text itself when it does not parse, "-" when empty.
std::string DescribeCreated(const std::string& rfc3339, int64_t now);

// "in 4m", "expired", "never" (empty), or the text itself when it does not parse.
std::string DescribeExpiry(const std::string& rfc3339, int64_t now);

// 1536 -> "1.5 KiB".
std::string FormatBytes(int64_t bytes);

}  // namespace bulkhead::cli
