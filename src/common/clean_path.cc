#include "common/clean_path.h"

#include <vector>

namespace bulkhead {

std::string CleanAbsolutePath(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string clean;
  for (std::string_view part : parts) {
    clean += '/';
    clean += part;
  }
  return clean.empty() ? std::string("/") : clean;
}

}  // namespace bulkhead
