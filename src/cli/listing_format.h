// How `bulkhead ls ID` and `bulkhead ps` show files and processes: aligned tables built
// from the API's Entry and Process objects.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace bulkhead::cli {

// "drwxr-xr-x" from an Entry's type ("file", "dir", "symlink", "other") and permission bits.
std::string FormatMode(const std::string& type, int64_t mode);

// An RFC 3339 time as "YYYY-MM-DD HH:MM" in this machine's time zone; the text itself
// when it does not parse, "-" when empty.
std::string FormatLocalTime(const std::string& rfc3339);

// The table of `bulkhead ls ID PATH`: MODE SIZE MODIFIED NAME, sorted by name. Names are
// relative to `root` (the listed directory's absolute path), so deeper listings show
// "sub/file"; symlinks show as "name -> target".
std::string FormatFileListing(const nlohmann::json& entries, const std::string& root);

// An argv as one line a shell would read back: words quoted only where needed.
std::string DescribeCommand(const nlohmann::json& argv);

// The table of `bulkhead ps`: PID TAG STATE EXIT STARTED COMMAND. `now` is for "5s ago".
std::string FormatProcessTable(const nlohmann::json& processes, int64_t now);

}  // namespace bulkhead::cli
