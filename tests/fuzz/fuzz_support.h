// What the fuzz targets share: failing loudly, temporary directories, running code chrooted
// into a temporary tree, and comparing a tree before and after (nothing may change where an
// operation has no business).
#pragma once
#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace bulkhead::fuzz {

// Reports a broken invariant and aborts, so libFuzzer keeps the input as a crash.
[[noreturn]] void Fail(std::string_view what);
#define FUZZ_CHECK(condition, detail)                                                             \
  do {                                                                                            \
    if (!(condition)) ::bulkhead::fuzz::Fail(std::string(#condition) + ": " + std::string(detail)); \
  } while (0)

// A new directory /tmp/bh-fuzz-<name>-<pid>-XXXXXX, removed when the process exits normally.
std::string MakeTempDir(std::string_view name);
// Removes a tree without following symlinks (rm -rf).
void RemoveTree(const std::string& path);

// Runs `work` in a thread of its own whose root and working directory are `root` (chroot),
// and whose file descriptor table is its own (so it may redirect 0, 1 and 2). The rest of the
// process keeps the real root. Whatever fails inside (a sanitizer report, an abort) leaves the
// chroot first, so the report is symbolized and libFuzzer writes its crash file where asked.
// Needs root (CAP_SYS_CHROOT).
void RunChrootedThread(const std::string& root, const std::function<void()>& work);

// Call once from LLVMFuzzerInitialize in targets that chroot: remembers the real root,
// working directory and standard streams for the way out, and sends sanitizer reports to a
// copy of stderr that no redirection of fd 2 can hide.
void PrepareChrootEscape();
// In a thread of RunChrootedThread that redirected fds 0, 1 and 2: puts the real ones back.
void RestoreStandardStreams();

// A file descriptor holding `data` (a memfd at offset 0), for code that reads stdin.
int MemoryFile(std::string_view data);
std::string ReadWholeFd(int fd);  // from offset 0

// Every entry below `dir` (not following symlinks) by its path relative to `dir`, with what
// identifies its state: type, permission bits, owner, a file's content, a symlink's target.
// Directory times are left out (adding an entry changes them).
using TreeSnapshot = std::map<std::string, std::string>;
TreeSnapshot SnapshotTree(const std::string& dir);
// The relative paths that were added, removed or changed between two snapshots.
std::vector<std::string> ChangedPaths(const TreeSnapshot& before, const TreeSnapshot& after);

// Whether `path` is `base` or lies below it ("a/b" is below "a"; "ab" is not). Both relative
// or both absolute, normalized.
bool IsAtOrBelow(std::string_view path, std::string_view base);

}  // namespace bulkhead::fuzz
