#include "cli/listing_format.h"

#include <time.h>

#include <algorithm>
#include <vector>

#include "cli/output_format.h"
#include "client/exec_stream.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

std::string NumberField(const json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_number_integer() ? std::to_string(it->get<int64_t>()) : "-";
}

// The entry's name as listed from `root`: its path below root, else its own name.
std::string ListedName(const json& entry, const std::string& root) {
  std::string path = StringField(entry, "path");
  std::string prefix = root == "/" ? root : root + "/";
  if (!root.empty() && path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0) {
    return path.substr(prefix.size());
  }
  std::string name = StringField(entry, "name");
  return name.empty() ? path : name;
}

bool NeedsQuoting(const std::string& word) {
  if (word.empty()) return true;
  return word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%") !=
         std::string::npos;
}

std::string ShellQuote(const std::string& word) {
  if (!NeedsQuoting(word)) return word;
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// "0", "signal 9 (KILL)" or "-" while running.
std::string DescribeExit(const json& process) {
  if (auto signal = process.find("signal"); signal != process.end() && !signal->is_null()) {
    std::optional<int> number = SignalFromJson(*signal);
    if (number) return "signal " + std::to_string(*number);
  }
  if (auto code = process.find("exit_code"); code != process.end() && code->is_number_integer()) {
    return std::to_string(code->get<int>());
  }
  return "-";
}

}  // namespace

std::string FormatMode(const std::string& type, int64_t mode) {
  std::string text = "?---------";
  if (type == "file") text[0] = '-';
  if (type == "dir") text[0] = 'd';
  if (type == "symlink") text[0] = 'l';
  static constexpr char kLetters[] = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (mode & (0400 >> i)) text[1 + i] = kLetters[i];
  }
  // setuid, setgid and sticky replace the x of their class: lower case when x is set too.
  auto special = [&text, mode](int64_t bit, size_t position, char letter) {
    if (!(mode & bit)) return;
    text[position] = text[position] == 'x' ? letter : static_cast<char>(letter - 'a' + 'A');
  };
  special(04000, 3, 's');
  special(02000, 6, 's');
  special(01000, 9, 't');
  return text;
}

std::string FormatLocalTime(const std::string& rfc3339) {
  if (rfc3339.empty()) return "-";
  std::optional<int64_t> when = ParseRfc3339(rfc3339);
  if (!when) return rfc3339;
  time_t seconds = static_cast<time_t>(*when);
  struct tm parts{};
  if (localtime_r(&seconds, &parts) == nullptr) return rfc3339;
  char text[32];
  strftime(text, sizeof(text), "%Y-%m-%d %H:%M", &parts);
  return text;
}

std::string FormatFileListing(const json& entries, const std::string& root) {
  std::vector<std::vector<std::string>> rows;
  if (entries.is_array()) {
    for (const json& entry : entries) {
      if (!entry.is_object()) continue;
      std::string type = StringField(entry, "type");
      auto mode = entry.find("mode");
      std::string name = ListedName(entry, root);
      if (type == "symlink") name += " -> " + StringField(entry, "target");
      rows.push_back({FormatMode(type, mode != entry.end() && mode->is_number_integer() ? mode->get<int64_t>() : 0),
                      NumberField(entry, "size"), FormatLocalTime(StringField(entry, "mtime")), name});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a[3] < b[3]; });
  rows.insert(rows.begin(), {"MODE", "SIZE", "MODIFIED", "NAME"});
  return FormatTable(rows);
}

std::string DescribeCommand(const json& argv) {
  if (argv.is_string()) return argv.get<std::string>();
  std::string line;
  if (!argv.is_array()) return line;
  for (const json& word : argv) {
    if (!line.empty()) line += ' ';
    line += ShellQuote(word.is_string() ? word.get<std::string>() : word.dump());
  }
  return line;
}

std::string FormatProcessTable(const json& processes, int64_t now) {
  std::vector<std::vector<std::string>> rows = {{"PID", "TAG", "STATE", "EXIT", "STARTED", "COMMAND"}};
  if (processes.is_array()) {
    for (const json& process : processes) {
      if (!process.is_object()) continue;
      std::string tag = StringField(process, "tag");
      auto cmd = process.find("cmd");
      rows.push_back({NumberField(process, "pid"), tag.empty() ? "-" : tag, StringField(process, "state"),
                      DescribeExit(process), DescribeCreated(StringField(process, "started_at"), now),
                      cmd != process.end() ? DescribeCommand(*cmd) : ""});
    }
  }
  return FormatTable(rows);
}

}  // namespace bulkhead::cli
