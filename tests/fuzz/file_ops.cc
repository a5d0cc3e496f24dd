// The file operations of the files API, from the request to the worker inside the sandbox:
// the route's query or body is parsed (file_request.h), joined to the sandbox's workdir
// (FileOpJson) and run by the worker (init::RunFileOp) the way init runs it: in a process
// whose root is the sandbox's. Here that root is a temporary tree, entered with chroot(2) by
// a thread of its own, holding directories, files and symlinks that point up, to the root,
// into a "secret" directory, at themselves and nowhere. The input is up to four operations on
// paths made of that tree's names, "..", "." and odd bytes; tars for archive_extract are built
// from the same names (symlinks first, then entries through them, hard links out, ...).
//
// Checked after every operation, by comparing the tree before and after:
//   - nothing outside the sandbox's root changes (a file beside the chroot);
//   - read, stat, list and archive_create change nothing;
//   - mkdir adds directories only; write changes only its target (replaced, never written
//     through a final symlink) and the directories it creates; remove removes only the named
//     entry and what is below it (never what a symlink inside points to); move touches only
//     what is at or below its two names; archive_extract changes only what is at or below
//     its target directory;
//   - list and archive_create report only entries reached without passing a symlink below
//     the requested path; every reported path is below the requested one;
//   - the worker answers one JSON line: an Entry for the path it was given, or an error with
//     a code.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fuzzer/FuzzedDataProvider.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "init/file_worker.h"
#include "service/file_request.h"

namespace {

using namespace bulkhead;
using nlohmann::json;

std::string g_base;     // /tmp/bh-fuzz-file_ops-XXXXXX
std::string g_root;     // g_base/root: the sandbox's "/"
std::string g_outside;  // g_base/outside: beside the root, never reachable
fuzz::TreeSnapshot g_outside_snapshot;

constexpr const char* kWorkdir = "/w";
const char* const kNames[] = {"w",       "a",        "b",      "f",     "g",      "x",    "secret", "sub",
                              "file",    "l_up",     "l_root", "l_x",   "l_secret", "l_loop", "l_dd", "l_a",
                              "dangling", "new",     "n2",     ".",     "..",     "",     "l_w"};

void Write(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, content.data(), content.size()) != ssize_t(content.size())) fuzz::Fail("write " + path);
  ::close(fd);
}

void Symlink(const char* target, const std::string& path) {
  if (::symlink(target, path.c_str()) != 0) fuzz::Fail("symlink " + path);
}

// The sandbox's tree, fresh for every input.
void BuildTree() {
  fuzz::RemoveTree(g_root);
  const std::string& r = g_root;
  for (const char* dir : {"", "/w", "/w/a", "/w/a/b", "/x", "/x/sub"}) {
    if (::mkdir((r + dir).c_str(), 0755) != 0) fuzz::Fail("mkdir " + r + dir);
  }
  Write(r + "/w/a/f", "hello\n");
  Write(r + "/w/a/b/g", "deep\n");
  Write(r + "/x/secret", "secret\n");
  Write(r + "/x/sub/file", "sub file\n");
  Symlink("..", r + "/w/l_up");
  Symlink("/", r + "/w/l_root");
  Symlink("/x", r + "/w/l_x");
  Symlink("/x/secret", r + "/w/l_secret");
  Symlink("l_loop", r + "/w/a/l_loop");
  Symlink("../..", r + "/w/a/l_dd");
  Symlink("a", r + "/w/l_a");
  Symlink("/nowhere/at/all", r + "/w/dangling");
  Symlink("/w", r + "/x/sub/l_w");
}

std::string ConsumePath(FuzzedDataProvider& fdp) {
  std::string path = fdp.ConsumeBool() ? "/" : "";
  const size_t count = fdp.ConsumeIntegralInRange<size_t>(0, 5);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) path += '/';
    const size_t pick = fdp.ConsumeIntegralInRange<size_t>(0, std::size(kNames));
    path += pick < std::size(kNames) ? std::string(kNames[pick]) : fdp.ConsumeRandomLengthString(12);
  }
  return path;
}

// The path as FileOpArgs::Path normalizes it: empty and "." components dropped.
std::string Normalized(const std::string& raw) {
  std::string out;
  size_t start = 0;
  while (start <= raw.size()) {
    size_t end = std::min(raw.find('/', start), raw.size());
    std::string part = raw.substr(start, end - start);
    if (!part.empty() && part != ".") out += "/" + part;
    start = end + 1;
  }
  return out.empty() ? "/" : out;
}

std::string ParentOf(const std::string& normalized) {
  size_t slash = normalized.rfind('/');
  return slash == 0 ? "/" : normalized.substr(0, slash);
}
std::string NameOf(const std::string& normalized) { return normalized.substr(normalized.rfind('/') + 1); }

// realpath(3) inside the chroot: the sandbox's view. "" if it does not resolve.
std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : std::string();
}

// Where `normalized` itself is, its final component not followed: "" if the parent does not
// resolve (or the name is "..", which names no entry of its own).
std::string EntryLocation(const std::string& normalized) {
  if (normalized == "/") return "/";
  const std::string name = NameOf(normalized);
  if (name == "..") return {};
  const std::string parent = RealPath(ParentOf(normalized));
  if (parent.empty()) return {};
  return parent == "/" ? "/" + name : parent + "/" + name;
}

// Walks `below` (relative components) down from the directory `top` without following a
// symlink anywhere but at `top`; "" when every component but the last is a directory.
std::string CheckNoSymlinkPassed(const std::string& top, const std::string& below) {
  int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + top;
  std::string problem;
  size_t start = 0;
  while (problem.empty()) {
    size_t end = below.find('/', start);
    if (end == std::string::npos) break;  // the last component may be anything
    const std::string part = below.substr(start, end - start);
    int next = ::openat(fd, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    // A name that is not UTF-8 comes back repaired (U+FFFD) in the JSON: no file has that name.
    if (next < 0 && errno == ENOENT && part.find("\xEF\xBF\xBD") != std::string::npos) break;
    if (next < 0) problem = top + "/" + below + ": " + part + " is not a directory (" + std::strerror(errno) + ")";
    ::close(fd);
    fd = next;
    start = end + 1;
  }
  if (fd >= 0) ::close(fd);
  return problem;
}

struct Tar {
  std::string bytes;
};

// A tar of up to six entries made of the tree's names: files, directories, symlinks (to
// anywhere) and hard links, in the order the input gives.
Tar ConsumeTar(FuzzedDataProvider& fdp) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (fdp.ConsumeBool()) archive_write_add_filter_gzip(a);
  static std::string buffer;
  buffer.assign(1 << 20, '\0');
  size_t used = 0;
  archive_write_open_memory(a, buffer.data(), buffer.size(), &used);
  const size_t count = fdp.ConsumeIntegralInRange<size_t>(0, 6);
  for (size_t i = 0; i < count; ++i) {
    struct archive_entry* entry = archive_entry_new();
    const std::string name = ConsumePath(fdp);
    archive_entry_copy_pathname(entry, name.empty() ? "." : name.c_str());
    archive_entry_set_mtime(entry, 1700000000, 0);
    const int kind = fdp.ConsumeIntegralInRange(0, 3);
    const std::string content = kind == 0 ? fdp.ConsumeRandomLengthString(64) : std::string();
    if (kind == 0) {
      archive_entry_set_filetype(entry, AE_IFREG);
      archive_entry_set_perm(entry, 0644);
      archive_entry_set_size(entry, la_int64_t(content.size()));
    } else if (kind == 1) {
      archive_entry_set_filetype(entry, AE_IFDIR);
      archive_entry_set_perm(entry, fdp.ConsumeBool() ? 0755 : 0555);
    } else if (kind == 2) {
      archive_entry_set_filetype(entry, AE_IFLNK);
      archive_entry_set_perm(entry, 0777);
      archive_entry_copy_symlink(entry, ConsumePath(fdp).c_str());
    } else {
      archive_entry_set_filetype(entry, AE_IFREG);
      archive_entry_set_perm(entry, 0644);
      archive_entry_copy_hardlink(entry, ConsumePath(fdp).c_str());
    }
    archive_write_header(a, entry);
    if (!content.empty()) archive_write_data(a, content.data(), content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return Tar{buffer.substr(0, used)};
}

enum class Op { kRead, kWrite, kStat, kList, kMkdir, kMove, kRemove, kArchiveCreate, kArchiveExtract };

struct Outcome {
  int status = -1;
  std::string out, err;
  std::vector<std::string> allowed;  // sandbox paths at or below which changes are allowed
  bool directories_may_appear = false;
  std::string problem;  // a broken invariant found inside the chroot
};

// Checks made inside the chroot after the operation ran: what it reported.
void CheckReport(Op op, const json& file_op, Outcome& outcome) {
  if (outcome.status != 0) return;
  const std::string path = Normalized(file_op.value("path", file_op.value("to", std::string())));
  const std::string first_line = outcome.out.substr(0, outcome.out.find('\n'));
  if (op == Op::kStat || op == Op::kMkdir || op == Op::kMove || op == Op::kWrite) {
    json entry = json::parse(first_line, nullptr, false);
    if (!entry.is_object() || entry.value("path", std::string()) != path) {
      outcome.problem = "the Entry does not name " + path + ": " + first_line;
    }
  } else if (op == Op::kList) {
    json listing = json::parse(first_line, nullptr, false);
    if (!listing.is_object() || !listing["entries"].is_array()) {
      outcome.problem = "list answered " + first_line;
      return;
    }
    const std::string top = RealPath(path);
    for (const json& entry : listing["entries"]) {
      const std::string reported = entry.value("path", std::string());
      const std::string prefix = path == "/" ? "/" : path + "/";
      if (reported.compare(0, prefix.size(), prefix) != 0) {
        outcome.problem = "list of " + path + " reported " + reported;
        return;
      }
      if (std::string problem = CheckNoSymlinkPassed(top, reported.substr(prefix.size())); !problem.empty()) {
        outcome.problem = "list of " + path + " went through a symlink: " + problem;
        return;
      }
    }
  } else if (op == Op::kArchiveCreate) {
    const std::string top = RealPath(path);
    struct stat st;
    if (::stat(top.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // a single file
    struct archive* a = archive_read_new();
    archive_read_support_format_tar(a);
    archive_read_open_memory(a, outcome.out.data(), outcome.out.size());
    struct archive_entry* entry;
    while (outcome.problem.empty() && archive_read_next_header(a, &entry) == ARCHIVE_OK) {
      const std::string name = archive_entry_pathname(entry);
      if (name.empty() || name[0] == '/' || name == ".." || name.starts_with("../") || name.find("/../") != std::string::npos) {
        outcome.problem = "archive_create stored the name " + name;
      } else if (std::string problem = CheckNoSymlinkPassed(top, name); !problem.empty()) {
        outcome.problem = "archive_create of " + path + " went through a symlink: " + problem;
      }
    }
    archive_read_free(a);
  }
}

// Runs one operation as the worker would, inside the chroot.
Outcome RunOp(Op op, const json& file_op, const std::string& input) {
  Outcome outcome;
  fuzz::RunChrootedThread(g_root, [&] {
    // Where this operation may change things, resolved before it runs (move and remove
    // change what their names resolve to).
    const std::string path = Normalized(file_op.value("path", std::string()));
    if (op == Op::kRemove) outcome.allowed.push_back(EntryLocation(path));
    if (op == Op::kMove) {
      outcome.allowed.push_back(EntryLocation(Normalized(file_op.value("from", std::string()))));
      outcome.allowed.push_back(EntryLocation(Normalized(file_op.value("to", std::string()))));
    }

    int in = fuzz::MemoryFile(input);
    int out = fuzz::MemoryFile({});
    int err = fuzz::MemoryFile({});
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    outcome.status = init::RunFileOp(file_op.dump());
    fuzz::RestoreStandardStreams();
    outcome.out = fuzz::ReadWholeFd(out);
    outcome.err = fuzz::ReadWholeFd(err);
    ::close(in);
    ::close(out);
    ::close(err);

    if (op == Op::kWrite) {
      outcome.directories_may_appear = true;
      // Replaced where it is, or (append) written where its final symlink leads.
      outcome.allowed.push_back(EntryLocation(path));
      if (file_op.value("append", false)) outcome.allowed.push_back(RealPath(path));
    } else if (op == Op::kMkdir) {
      outcome.directories_may_appear = true;
    } else if (op == Op::kArchiveExtract) {
      outcome.directories_may_appear = true;
      outcome.allowed.push_back(RealPath(path));
    }
    CheckReport(op, file_op, outcome);
  });
  return outcome;
}

void CheckChanges(const json& file_op, const Outcome& outcome, const fuzz::TreeSnapshot& before,
                  const fuzz::TreeSnapshot& after) {
  for (const std::string& changed : fuzz::ChangedPaths(before, after)) {
    const std::string sandbox_path = "/" + changed;
    bool allowed = false;
    for (const std::string& base : outcome.allowed) allowed = allowed || (!base.empty() && fuzz::IsAtOrBelow(sandbox_path, base));
    // (A snapshot's state starts with st_mode.)
    if (outcome.directories_may_appear && !before.count(changed) && S_ISDIR(std::stoul(after.at(changed)))) allowed = true;
    FUZZ_CHECK(allowed, "operation " + file_op.dump() + " changed " + sandbox_path + " (" +
                            (before.count(changed) ? before.at(changed) : "absent") + " -> " +
                            (after.count(changed) ? after.at(changed) : "absent") + "); status " +
                            std::to_string(outcome.status) + ", stderr " + outcome.err);
  }
}

api::QueryParams ConsumeQuery(FuzzedDataProvider& fdp, const std::string& path) {
  api::QueryParams query = {{"path", path}};
  if (fdp.ConsumeBool()) query.emplace_back("append", fdp.ConsumeBool() ? "true" : "false");
  if (fdp.ConsumeBool()) query.emplace_back("recursive", fdp.ConsumeBool() ? "true" : "false");
  if (fdp.ConsumeBool()) query.emplace_back("depth", std::to_string(fdp.ConsumeIntegralInRange(1, 4)));
  if (fdp.ConsumeBool()) query.emplace_back("mode", fdp.ConsumeBool() ? "0600" : "755");
  return query;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::PrepareChrootEscape();
  g_base = fuzz::MakeTempDir("file_ops");
  g_root = g_base + "/root";
  g_outside = g_base + "/outside";
  if (::mkdir(g_outside.c_str(), 0755) != 0) fuzz::Fail("mkdir outside");
  Write(g_outside + "/precious", "must never change\n");
  g_outside_snapshot = fuzz::SnapshotTree(g_outside);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  BuildTree();
  const size_t count = fdp.ConsumeIntegralInRange<size_t>(1, 4);
  for (size_t i = 0; i < count && fdp.remaining_bytes() > 0; ++i) {
    const Op op = static_cast<Op>(fdp.ConsumeIntegralInRange(0, 8));
    const std::string path = ConsumePath(fdp);
    Result<api::FileRequest> request = MakeError(ErrorCode::kInvalid, "");
    std::string input;
    switch (op) {
      case Op::kMkdir:
        request = api::ParseFileBody(api::FileOp::kMkdir, json{{"path", path}, {"parents", fdp.ConsumeBool()}}, {});
        break;
      case Op::kMove:
        request = api::ParseFileBody(api::FileOp::kMove, json{{"from", path}, {"to", ConsumePath(fdp)}}, {});
        break;
      default: {
        static constexpr api::FileOp kQueryOps[] = {api::FileOp::kRead, api::FileOp::kWrite, api::FileOp::kStat,
                                                    api::FileOp::kList, api::FileOp::kMkdir, api::FileOp::kMove,
                                                    api::FileOp::kRemove, api::FileOp::kArchiveCreate,
                                                    api::FileOp::kArchiveExtract};
        request = api::ParseFileQuery(kQueryOps[int(op)], ConsumeQuery(fdp, path));
        if (op == Op::kWrite) input = fdp.ConsumeRandomLengthString(256);
        if (op == Op::kArchiveExtract) input = ConsumeTar(fdp).bytes;
      }
    }
    if (!request.ok()) continue;
    Result<json> file_op = api::FileOpJson(*request, kWorkdir);
    if (!file_op.ok()) continue;

    const fuzz::TreeSnapshot before = fuzz::SnapshotTree(g_root);
    const Outcome outcome = RunOp(op, *file_op, input);
    FUZZ_CHECK(outcome.problem.empty(), outcome.problem + " (operation " + file_op->dump() + ")");
    FUZZ_CHECK(outcome.status == 0 || outcome.status == 1, std::to_string(outcome.status));
    if (outcome.status == 1) {
      json error = json::parse(outcome.err.substr(0, outcome.err.find('\n')), nullptr, false);
      FUZZ_CHECK(error.is_object() && error["code"].is_string() && error["message"].is_string(), outcome.err);
      FUZZ_CHECK(error["code"] != "internal", file_op->dump() + " failed internally: " + outcome.err);
    }
    CheckChanges(*file_op, outcome, before, fuzz::SnapshotTree(g_root));
    FUZZ_CHECK(fuzz::SnapshotTree(g_outside) == g_outside_snapshot, "something beside the sandbox's root changed");
  }
  return 0;
}
