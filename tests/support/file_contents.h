// A test's view of what a descriptor or a path holds.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/unique_fd.h"

namespace bulkhead::testing {

// Everything fd holds, read from offset 0 (its offset untouched).
inline std::string FdContents(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  for (off_t at = 0; (n = ::pread(fd, buf, sizeof buf, at)) > 0; at += n) out.append(buf, static_cast<size_t>(n));
  return out;
}

// The file at path (not followed if a symlink), or "<cannot open>".
inline std::string FileContents(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  return fd ? FdContents(fd.get()) : std::string("<cannot open>");
}

}  // namespace bulkhead::testing
