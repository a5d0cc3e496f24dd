#include "build/context_ignore.h"

#include <vector>

#include <cstdint>
#include <optional>
#include <span>

namespace bulkhead::build {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// The UTF-8 character at s[i] and its length (a byte that starts none is a character of its own).
uint32_t DecodeChar(std::string_view s, size_t i, size_t& length) {
  const auto lead = static_cast<unsigned char>(s[i]);
  length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  if (i + length > s.size()) length = 1;
  for (size_t k = 1; k < length; k++)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) length = 1;
  if (length == 1) return lead;
  uint32_t c = lead & (0x7F >> length);
  for (size_t k = 1; k < length; k++) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return c;
}

// A character in a class at pattern[i] ('\\' escapes the next one), i moved past it; nullopt
// for an unescaped '-' or ']' or the end of the pattern.
std::optional<uint32_t> ClassChar(std::string_view pattern, size_t& i) {
  if (i >= pattern.size() || pattern[i] == '-' || pattern[i] == ']') return std::nullopt;
  if (pattern[i] == '\\' && ++i == pattern.size()) return std::nullopt;
  size_t length = 0;
  const uint32_t c = DecodeChar(pattern, i, length);
  i += length;
  return c;
}

// The class "[...]" at pattern[i] (Go's: '^' first negates, then characters and lo-hi
// ranges, at least one): the index past its ']', and in `in` whether c is in it; nullopt when
// it is malformed.
std::optional<size_t> MatchClass(std::string_view pattern, size_t i, uint32_t c, bool& in) {
  i++;
  const bool negated = i < pattern.size() && pattern[i] == '^';
  if (negated) i++;
  bool found = false;
  for (int ranges = 0;; ranges++) {
    if (ranges > 0 && i < pattern.size() && pattern[i] == ']') {
      in = found != negated;
      return i + 1;
    }
    const std::optional<uint32_t> lo = ClassChar(pattern, i);
    if (!lo) return std::nullopt;
    std::optional<uint32_t> hi = lo;
    if (i < pattern.size() && pattern[i] == '-') {
      i++;
      hi = ClassChar(pattern, i);
      if (!hi) return std::nullopt;
    }
    if (*lo <= c && c <= *hi) found = true;
  }
}

// One element of `pattern` that is not '*' against the character at name[ni]: on a match
// both indexes move past what matched.
bool MatchOne(std::string_view pattern, size_t& pi, std::string_view name, size_t& ni) {
  size_t length = 0;
  const uint32_t c = DecodeChar(name, ni, length);
  if (pattern[pi] == '?') {
    pi++;
    ni += length;
    return true;
  }
  if (pattern[pi] == '[') {
    bool in = false;
    const std::optional<size_t> next = MatchClass(pattern, pi, c, in);
    if (!next || !in) return false;
    pi = *next;
    ni += length;
    return true;
  }
  size_t p = pi;
  if (pattern[p] == '\\' && ++p == pattern.size()) return false;
  if (pattern[p] != name[ni]) return false;
  pi = p + 1;
  ni++;
  return true;
}

// Go's filepath.Match within one path component: '*' any run of characters, '?' one, '[...]' a
// class, '\\' escapes. A '*' is tried at each length, shortest first, going back to the last
// '*' when what follows it fails.
bool MatchComponent(std::string_view pattern, std::string_view name) {
  size_t pi = 0, ni = 0;
  size_t star_pi = std::string_view::npos, star_ni = 0;
  while (ni < name.size()) {
    if (pi < pattern.size() && pattern[pi] == '*') {
      star_pi = ++pi;
      star_ni = ni;
      continue;
    }
    if (pi < pattern.size() && MatchOne(pattern, pi, name, ni)) continue;
    if (star_pi == std::string_view::npos) return false;
    size_t length = 0;
    DecodeChar(name, star_ni, length);
    star_ni += length;
    pi = star_pi;
    ni = star_ni;
  }
  while (pi < pattern.size() && pattern[pi] == '*') pi++;
  return pi == pattern.size();
}

// Every '[' closed by a well-formed class, no '\\' at the end.
bool WellFormed(std::string_view pattern) {
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '\\') {
      if (i + 1 == pattern.size()) return false;
      i += 2;
    } else if (pattern[i] == '[') {
      bool in = false;
      const std::optional<size_t> next = MatchClass(pattern, i, 0, in);
      if (!next) return false;
      i = *next;
    } else {
      i++;
    }
  }
  return true;
}

// Whether `pattern`'s parts match all of `path`'s. "**" is any number of names, none too, but
// at the end at least one: "a/**" leaves out what is in a, not a itself (as Docker).
// Matched from the ends, a table of which pattern suffix matches which path suffix: time
// P x N however many "**" the pattern has (trying each split of each "**" in turn took
// exponential time on a hostile .dockerignore).
bool MatchParts(std::span<const std::string> pattern, std::span<const std::string_view> path) {
  const size_t p_count = pattern.size(), n_count = path.size();
  // next[j]: pattern[i + 1..] matches path[j..]; row[j]: pattern[i..] matches path[j..].
  std::vector<char> next(n_count + 1, 0), row(n_count + 1, 0);
  next[n_count] = 1;  // the empty pattern matches the empty path only
  for (size_t i = p_count; i-- > 0;) {
    if (pattern[i] == "**") {
      const bool last = i + 1 == p_count;  // at the end it takes at least one name
      bool any = false;                    // next[k] for some k >= j (+1 when last)
      for (size_t j = n_count + 1; j-- > 0;) {
        if (!last) any = any || next[j];
        row[j] = any;
        if (last) any = any || next[j];
      }
    } else {
      row[n_count] = 0;
      for (size_t j = 0; j < n_count; j++) row[j] = next[j + 1] && MatchComponent(pattern[i], path[j]);
    }
    next.swap(row);
  }
  return next[0];
}

// A pattern that matches a directory matches everything below it.
bool MatchesOrParentMatches(std::span<const std::string> pattern, std::span<const std::string_view> path) {
  for (size_t n = 1; n <= path.size(); n++)
    if (MatchParts(pattern, path.first(n))) return true;
  return false;
}

// Whether `pattern` could match something below the directory `dir` (conservatively: a "**"
// could match anything).
bool CouldMatchBelow(std::span<const std::string> pattern, std::span<const std::string_view> dir) {
  if (pattern.empty() || dir.empty()) return true;
  if (pattern[0] == "**") return true;
  return MatchComponent(pattern[0], dir[0]) && CouldMatchBelow(pattern.subspan(1), dir.subspan(1));
}

std::vector<std::string_view> PathParts(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::string_view part : Split(path, '/'))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

}  // namespace

Result<ContextIgnore> ContextIgnore::Parse(std::string_view dockerignore) {
  if (dockerignore.starts_with("\xEF\xBB\xBF")) dockerignore.remove_prefix(3);  // a UTF-8 byte order mark
  ContextIgnore ignore;
  int line_no = 0;
  for (std::string_view line : Split(dockerignore, '\n')) {
    line_no++;
    if (line.starts_with('#')) continue;  // a comment only at the very start of the line, as Docker
    std::string_view text = Trim(line);
    if (text.empty()) continue;
    Pattern pattern;
    if (text.starts_with('!')) {
      pattern.exception = true;
      text = Trim(text.substr(1));
      if (text.empty())
        return MakeError(ErrorCode::kBadRequest, ".dockerignore line " + std::to_string(line_no) + ": \"!\" excepts nothing",
                         "dockerignore_invalid");
    }
    // Cleaned as Go's filepath.Clean does, then made relative: no empty or "." parts, and ".."
    // takes off the part before it (at the root, nothing).
    const bool absolute = text.starts_with('/');
    for (std::string_view part : Split(text, '/')) {
      if (part.empty() || part == ".") continue;
      if (part == ".." && !pattern.parts.empty() && pattern.parts.back() != "..") {
        pattern.parts.pop_back();
      } else if (!(part == ".." && absolute && pattern.parts.empty())) {
        if (!WellFormed(part))
          return MakeError(ErrorCode::kBadRequest,
                           ".dockerignore line " + std::to_string(line_no) + ": the pattern \"" + std::string(text) +
                               "\" is malformed (an unclosed '[', an empty class or a '\\' at the end)",
                           "dockerignore_invalid");
        pattern.parts.emplace_back(part);
      }
    }
    // "/" and "." match nothing in the context.
    if (!pattern.parts.empty()) ignore.patterns_.push_back(std::move(pattern));
  }
  return ignore;
}

bool ContextIgnore::Ignored(std::string_view path) const {
  const std::vector<std::string_view> parts = PathParts(path);
  // The last pattern that matches decides; one that could not change the answer is skipped.
  bool ignored = false;
  for (const Pattern& pattern : patterns_) {
    if (pattern.exception != ignored) continue;
    if (MatchesOrParentMatches(pattern.parts, parts)) ignored = !pattern.exception;
  }
  return ignored;
}

bool ContextIgnore::MayTakeBelow(std::string_view path) const {
  const std::vector<std::string_view> parts = PathParts(path);
  // Whatever matches `path` matches everything below it too: only an exception after the last
  // pattern that matches `path` can take something below back.
  size_t last = patterns_.size();
  while (last > 0 && !MatchesOrParentMatches(patterns_[last - 1].parts, parts)) last--;
  if (last == 0 || patterns_[last - 1].exception) return true;  // `path` itself is taken
  for (size_t i = last; i < patterns_.size(); i++)
    if (patterns_[i].exception && CouldMatchBelow(patterns_[i].parts, parts)) return true;
  return false;
}

}  // namespace bulkhead::build
