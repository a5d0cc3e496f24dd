// .dockerignore: which files of a build context are left out. The CLI leaves them out of the
// context it sends; the daemon leaves them out of a context any client sent.
//
// Docker's rules: one pattern per line, '#' lines are comments, blank lines skipped, each
// pattern cleaned (leading and trailing spaces and a leading '/' dropped, "a//b" and "./a"
// made "a/b" and "a"); '*' matches any run of characters but '/', '?' one character but '/',
// '[...]' a class, '\\' escapes, "**" any number of directories (none too); a pattern that
// matches a directory leaves out all below it; '!' makes an exception, and the last pattern
// matching a path decides.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bulkhead::build {

class ContextIgnore {
 public:
  // kBadRequest for a malformed pattern (an unclosed '['), naming its line.
  static Result<ContextIgnore> Parse(std::string_view dockerignore);

  // `path` is relative to the context's root, '/'-separated, with no "." or ".." parts.
  bool Ignored(std::string_view path) const;
  // Whether something below the directory `path` might still be taken (an exception names a
  // path under it): a walker that finds the directory ignored must still look inside.
  bool MayTakeBelow(std::string_view path) const;

 private:
  struct Pattern {
    std::vector<std::string> parts;  // the cleaned pattern split at '/'
    bool exception = false;
  };
  std::vector<Pattern> patterns_;
};

}  // namespace bulkhead::build
