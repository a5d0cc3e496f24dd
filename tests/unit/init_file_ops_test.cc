// File operations (ctl_protocol.h, "File operations"), run as init runs them: a forked
// process calls RunFileOp with pipes as its stdin, stdout and stderr. One test goes through
// the real bulkhead-init binary.
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/ctl_protocol.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "init/file_worker.h"
#include "init_client.h"

namespace bulkhead::init {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct WorkerOptions {
  std::optional<uid_t> uid;              // run as this uid (and gid), as init does for "user"
  std::optional<rlim_t> file_size_limit;  // RLIMIT_FSIZE
  void (*child_setup)() = nullptr;        // runs in the worker just before RunFileOp
};

struct WorkerOutcome {
  int exit_code = -1;  // -1: it did not exit normally
  std::string out;
  std::string err;
  json Line() const { return json::parse(out.substr(0, out.find('\n')), nullptr, false); }
  json Error() const { return json::parse(err, nullptr, false); }
  std::string Code() const {
    json error = Error();
    return error.is_object() && error.contains("code") ? error["code"].get<std::string>() : "(no error: " + err + ")";
  }
};

// A file operation's worker: a fork running RunFileOp with pipes as its stdio.
class Worker {
 public:
  explicit Worker(const json& op, WorkerOptions options = {}) {
    int in[2], out[2], err[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    std::string text = op.dump();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::close_range(3, ~0U, 0);
      ::signal(SIGPIPE, SIG_DFL);
      if (options.file_size_limit) {
        ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
        struct rlimit limit = {*options.file_size_limit, *options.file_size_limit};
        ::setrlimit(RLIMIT_FSIZE, &limit);
      }
      if (options.uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*options.uid, *options.uid, *options.uid) != 0 ||
                          ::setresuid(*options.uid, *options.uid, *options.uid) != 0)) {
        ::_exit(99);
      }
      if (options.child_setup) options.child_setup();
      ::_exit(RunFileOp(text));
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    stdin_.reset(in[1]);
    stdout_.reset(out[0]);
    stderr_.reset(err[0]);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }

  // Writes all of `data` to the worker's stdin (false if it stopped reading).
  bool WriteStdin(const std::string& data) {
    // Blocked in this thread: a worker that exits early turns the write into EPIPE.
    sigset_t pipe_signal, old;
    ::sigemptyset(&pipe_signal);
    ::sigaddset(&pipe_signal, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(stdin_.get(), data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += size_t(n);
    }
    // Consume a SIGPIPE raised here before unblocking it.
    struct timespec zero = {0, 0};
    while (::sigtimedwait(&pipe_signal, nullptr, &zero) > 0) {
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return off == data.size();
  }
  void CloseStdin() { stdin_.reset(); }
  void CloseStdout() { stdout_.reset(); }

  // The next line on stdout (without its newline), or nothing after `timeout` or on EOF.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = Clock::now() + timeout;
    while (true) {
      size_t newline = buffered_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffered_.substr(0, newline);
        buffered_.erase(0, newline + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{stdout_.get(), POLLIN, 0};
      if (left <= 0 || ::poll(&pfd, 1, int(left)) <= 0) return std::nullopt;
      char buf[4096];
      ssize_t n = ::read(stdout_.get(), buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      buffered_.append(buf, size_t(n));
    }
  }

  // How long a worker may go quiet before it counts as hung: generous, since a sanitizer build
  // on a loaded machine lists a hundred thousand entries slowly (a bound, not a timing check).
  static constexpr int kHangMs = 180000;

  // Reads stdout and stderr to their end, then reaps the worker.
  WorkerOutcome Finish() {
    WorkerOutcome outcome;
    outcome.out = std::move(buffered_);
    pollfd fds[2] = {{stdout_.get(), POLLIN, 0}, {stderr_.get(), POLLIN, 0}};
    std::string* sinks[2] = {&outcome.out, &outcome.err};
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
      if (::poll(fds, 2, kHangMs) <= 0) {
        ADD_FAILURE() << "the worker's output did not end";
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !fds[i].revents) continue;
        char buf[65536];
        ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n > 0) {
          sinks[i]->append(buf, size_t(n));
        } else {
          fds[i].fd = -1;
        }
      }
    }
    outcome.exit_code = Wait();
    return outcome;
  }

  // The worker's exit code once it exited (-1 if killed; a failure if it does not end).
  int Wait() {
    auto deadline = Clock::now() + std::chrono::milliseconds(kHangMs);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "the worker did not exit";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  UniqueFd stdin_, stdout_, stderr_;
  std::string buffered_;
};

WorkerOutcome RunOp(const json& op, const std::string& input = "", WorkerOptions options = {}) {
  Worker worker(op, options);
  std::thread writer([&] {
    worker.WriteStdin(input);
    worker.CloseStdin();
  });
  WorkerOutcome outcome = worker.Finish();
  writer.join();
  return outcome;
}

void WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  ASSERT_TRUE(fd.valid()) << path;
  ASSERT_EQ(::write(fd.get(), content.data(), content.size()), ssize_t(content.size()));
  ASSERT_EQ(::fchmod(fd.get(), mode), 0);
}

// open, write, close: exactly one IN_CLOSE_WRITE and no IN_ATTRIB, for the watch tests.
void WritePlain(const std::string& path, const std::string& content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid()) << path;
  ASSERT_EQ(::write(fd.get(), content.data(), content.size()), ssize_t(content.size()));
}

std::string ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return "(missing)";
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  return out;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : mode_t(-1);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

// Everything under `dir`: relative path -> "type mode content-or-target mtime-seconds".
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {  // does not follow symlinks
    std::string path = entry.path().string();
    struct stat st;
    ::lstat(path.c_str(), &st);
    std::string description = std::to_string(st.st_mode & 07777) + " ";
    if (S_ISLNK(st.st_mode)) {
      description = "link " + fs::read_symlink(path).string();
    } else if (S_ISDIR(st.st_mode)) {
      description = "dir " + description + std::to_string(st.st_mtim.tv_sec);
    } else {
      description = "file " + description + ReadFile(path) + " " + std::to_string(st.st_mtim.tv_sec);
    }
    out[path.substr(dir.size())] = description;
  }
  return out;
}

// A tar built with libarchive, for archive_extract.
struct TarEntry {
  std::string name;
  mode_t type = AE_IFREG;
  std::string data;
  std::string link;        // symlink target, or hard link target with hardlink
  bool hardlink = false;
  mode_t perm = 0644;
};

std::string BuildTar(const std::vector<TarEntry>& entries, const char* filter = nullptr) {
  std::string out;
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (filter) archive_write_add_filter_by_name(a, filter);
  archive_write_open2(
      a, &out, nullptr,
      [](struct archive*, void* sink, const void* buf, size_t n) -> la_ssize_t {
        static_cast<std::string*>(sink)->append(static_cast<const char*>(buf), n);
        return la_ssize_t(n);
      },
      nullptr, nullptr);
  for (const auto& e : entries) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_mtime(entry, 1700000000, 0);
    if (e.hardlink) {
      archive_entry_set_filetype(entry, AE_IFREG);
      archive_entry_set_hardlink(entry, e.link.c_str());
      archive_entry_set_size(entry, 0);
    } else {
      archive_entry_set_filetype(entry, e.type);
      if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.link.c_str());
      archive_entry_set_size(entry, e.type == AE_IFREG ? la_int64_t(e.data.size()) : 0);
    }
    archive_entry_set_perm(entry, e.perm);
    EXPECT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    if (!e.hardlink && e.type == AE_IFREG && !e.data.empty()) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

// The entry names of a tar, in order.
std::vector<std::string> TarNames(const std::string& tar) {
  std::vector<std::string> names;
  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  struct archive_entry* entry;
  int rc;
  // ARCHIVE_WARN: a UTF-8 name this process's C locale cannot convert; the raw name is kept.
  while ((rc = archive_read_next_header(a, &entry)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    names.push_back(archive_entry_pathname(entry));
  }
  archive_read_free(a);
  return names;
}

class FileOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/bulkhead-file-ops-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override {
    // Read-only directories made by a test must not stop the cleanup of a non-root run.
    for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
      if (entry.is_directory() && !entry.is_symlink()) ::chmod(entry.path().c_str(), 0755);
    }
    fs::remove_all(dir_);
  }
  std::string Path(const std::string& rel) const { return dir_ + "/" + rel; }

  std::string dir_;
};

// ---- arguments and errors ----

TEST_F(FileOpsTest, BadRequestsAreInvalidArgument) {
  EXPECT_EQ(RunOp(json{{"op", "shred"}, {"path", dir_}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"path", dir_}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", "relative/path"}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", 7}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", dir_ + std::string("\0x", 2)}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", "/" + std::string(5000, 'a')}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "list"}, {"path", dir_}, {"depth", 0}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "list"}, {"path", dir_}, {"depth", 33}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("m")}, {"mode", 010000}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "write"}, {"path", Path("w")}, {"append", "yes"}}).Code(), "invalid_argument");
  WorkerOutcome outcome = RunOp(json{{"op", "stat"}, {"path", "nope"}});
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.out, "");
  EXPECT_EQ(outcome.err.back(), '\n');  // one line
}

TEST_F(FileOpsTest, ErrorsMapErrnoToCodesAndNameThePath) {
  WriteFile(Path("file"), "x");
  WorkerOutcome missing = RunOp(json{{"op", "stat"}, {"path", Path("missing")}});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.Code(), "not_found");
  EXPECT_NE(missing.Error()["message"].get<std::string>().find(Path("missing")), std::string::npos) << missing.err;

  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", Path("file/below")}}).Code(), "not_a_directory");
  EXPECT_EQ(RunOp(json{{"op", "list"}, {"path", Path("file")}}).Code(), "not_a_directory");
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("file")}, {"parents", false}}).Code(), "exists");
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("file")}}).Code(), "exists");
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("file/sub")}}).Code(), "not_a_directory");
}

TEST_F(FileOpsTest, PermissionsAreTheUsersOwn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to change uid";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  WriteFile(Path("secret"), "root only", 0600);
  WorkerOptions nobody{.uid = 65534};
  EXPECT_EQ(RunOp(json{{"op", "read"}, {"path", Path("secret")}}, "", nobody).Code(), "permission_denied");
  EXPECT_EQ(RunOp(json{{"op", "write"}, {"path", Path("new")}}, "x", nobody).Code(), "permission_denied");
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("secret")}}, "", nobody).Code(), "permission_denied");
  EXPECT_FALSE(Exists(Path("new")));
  EXPECT_EQ(ReadFile(Path("secret")), "root only");
}

// ---- read ----

TEST_F(FileOpsTest, ReadSendsSizeLineThenTheBytes) {
  std::string content;
  for (int64_t i = 0; content.size() < 3 * 1024 * 1024 + 17; ++i) content += std::to_string(i * 7919) + ",";
  WriteFile(Path("big"), content);
  WorkerOutcome outcome = RunOp(json{{"op", "read"}, {"path", Path("big")}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  std::string header = "{\"size\":" + std::to_string(content.size()) + "}\n";
  ASSERT_EQ(outcome.out.substr(0, header.size()), header);
  EXPECT_TRUE(outcome.out.substr(header.size()) == content);

  WriteFile(Path("empty"), "");
  EXPECT_EQ(RunOp(json{{"op", "read"}, {"path", Path("empty")}}).out, "{\"size\":0}\n");
}

TEST_F(FileOpsTest, ReadsAKernelFilesystemsFileToItsEndWithoutASize) {
  // procfs says 0 bytes for it; what it holds comes, after a first line without a size.
  WorkerOutcome outcome = RunOp(json{{"op", "read"}, {"path", "/proc/sys/kernel/random/boot_id"}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(outcome.out, "{}\n" + ReadFile("/proc/sys/kernel/random/boot_id"));
  EXPECT_EQ(outcome.out.size(), 3u + 37u);
}

TEST_F(FileOpsTest, ReadRefusesDirectoriesAndSpecialFiles) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0644), 0);
  EXPECT_EQ(RunOp(json{{"op", "read"}, {"path", dir_}}).Code(), "is_a_directory");
  EXPECT_EQ(RunOp(json{{"op", "read"}, {"path", Path("fifo")}}).Code(), "invalid_argument");  // and does not block
  EXPECT_EQ(RunOp(json{{"op", "read"}, {"path", "/dev/null"}}).Code(), "invalid_argument");
  EXPECT_EQ(RunOp(json{{"op", "read"}, {"path", Path("missing")}}).Code(), "not_found");
}

// ---- write ----

TEST_F(FileOpsTest, WriteCreatesParentsAndReportsTheEntry) {
  WorkerOutcome outcome = RunOp(json{{"op", "write"}, {"path", Path("a/b/c.txt")}, {"mode", 0600}}, "hello");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(ReadFile(Path("a/b/c.txt")), "hello");
  EXPECT_EQ(ModeOf(Path("a/b/c.txt")), 0600u);
  EXPECT_EQ(ModeOf(Path("a/b")), 0755u);
  json entry = outcome.Line();
  EXPECT_EQ(entry["path"], Path("a/b/c.txt"));
  EXPECT_EQ(entry["name"], "c.txt");
  EXPECT_EQ(entry["type"], "file");
  EXPECT_EQ(entry["size"], 5);
  EXPECT_EQ(entry["mode"], 0600);
  EXPECT_EQ(entry["uid"], ::geteuid());
  EXPECT_EQ(entry["mtime"].get<std::string>().size(), std::string("2026-11-29T21:00:00.123Z").size());
  EXPECT_FALSE(entry.contains("target"));
  EXPECT_EQ(Names(Path("a/b")), std::set<std::string>{"c.txt"});  // no temporary file left

  // A new file without a mode gets 0644 (whatever the umask); an existing one keeps its mode.
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("plain")}}, "1").exit_code, 0);
  EXPECT_EQ(ModeOf(Path("plain")), 0644u);
  ASSERT_EQ(::chmod(Path("plain").c_str(), 0751), 0);
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("plain")}}, "22").exit_code, 0);
  EXPECT_EQ(ReadFile(Path("plain")), "22");
  EXPECT_EQ(ModeOf(Path("plain")), 0751u);
}

TEST_F(FileOpsTest, WriteWithoutParentsNeedsTheDirectory) {
  EXPECT_EQ(RunOp(json{{"op", "write"}, {"path", Path("no/such.txt")}, {"parents", false}}, "x").Code(), "not_found");
  EXPECT_FALSE(Exists(Path("no")));
  EXPECT_EQ(RunOp(json{{"op", "write"}, {"path", dir_}}, "x").Code(), "is_a_directory");
}

TEST_F(FileOpsTest, WriteReplacesASymlinkInsteadOfWritingThroughIt) {
  WriteFile(Path("target"), "keep");
  fs::create_symlink(Path("target"), Path("link"));
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("link")}}, "new").exit_code, 0);
  EXPECT_EQ(ReadFile(Path("target")), "keep");
  EXPECT_FALSE(fs::is_symlink(Path("link")));
  EXPECT_EQ(ReadFile(Path("link")), "new");
}

TEST_F(FileOpsTest, AppendWritesInPlace) {
  WriteFile(Path("log"), "one\n", 0640);
  WorkerOutcome outcome = RunOp(json{{"op", "write"}, {"path", Path("log")}, {"append", true}}, "two\n");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(ReadFile(Path("log")), "one\ntwo\n");
  EXPECT_EQ(ModeOf(Path("log")), 0640u);
  EXPECT_EQ(outcome.Line()["size"], 8);
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("fresh/log")}, {"append", true}, {"mode", 0600}}, "x").exit_code, 0);
  EXPECT_EQ(ReadFile(Path("fresh/log")), "x");
  EXPECT_EQ(ModeOf(Path("fresh/log")), 0600u);
}

TEST_F(FileOpsTest, FailedWriteLeavesTheOldContent) {
  WriteFile(Path("keep.txt"), "old content", 0640);
  std::string big(256 * 1024, 'n');
  WorkerOutcome outcome =
      RunOp(json{{"op", "write"}, {"path", Path("keep.txt")}}, big, WorkerOptions{.file_size_limit = 64 * 1024});
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.Code(), "too_large");
  EXPECT_EQ(ReadFile(Path("keep.txt")), "old content");
  EXPECT_EQ(ModeOf(Path("keep.txt")), 0640u);
  EXPECT_EQ(Names(dir_), std::set<std::string>{"keep.txt"});
}

TEST_F(FileOpsTest, WriteCutOffMidwayLeavesTheOldContentAndNoTemporaryFile) {
  WriteFile(Path("keep.txt"), "old content");
  Worker worker(json{{"op", "write"}, {"path", Path("keep.txt")}});
  ASSERT_TRUE(worker.WriteStdin(std::string(1024 * 1024, 'n')));
  // Killed while stdin is still open, as init kills a worker whose connection dropped.
  ::kill(worker.pid(), SIGKILL);
  EXPECT_EQ(worker.Wait(), -1);
  EXPECT_EQ(ReadFile(Path("keep.txt")), "old content");
  EXPECT_EQ(Names(dir_), std::set<std::string>{"keep.txt"});
}

TEST_F(FileOpsTest, FullDiskIsDiskFullAndLeavesTheOldContent) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  std::string small = Path("small");
  ASSERT_EQ(::mkdir(small.c_str(), 0755), 0);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=256k") != 0) GTEST_SKIP() << "cannot mount tmpfs here";
  ScopeGuard unmount([&] { ::umount2(small.c_str(), MNT_DETACH); });
  WriteFile(small + "/keep.txt", "old content");
  WorkerOutcome outcome = RunOp(json{{"op", "write"}, {"path", small + "/keep.txt"}}, std::string(1024 * 1024, 'n'));
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.Code(), "disk_full") << outcome.err;
  EXPECT_EQ(ReadFile(small + "/keep.txt"), "old content");
  EXPECT_EQ(Names(small), std::set<std::string>{"keep.txt"});
}

// Seccomp filters that take away what the write op's fast paths use, so its fallbacks run
// here too: no linkat(AT_EMPTY_PATH) (older kernels without CAP_DAC_READ_SEARCH), no linkat
// at all (and no /proc), no O_TMPFILE (filesystems without it).
void RefuseSyscall(int syscall, uint32_t flag_arg, uint64_t flag, int error) {
  scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
  if (flag == 0) {
    seccomp_rule_add(filter, SCMP_ACT_ERRNO(error), syscall, 0);
  } else {
    seccomp_rule_add(filter, SCMP_ACT_ERRNO(error), syscall, 1, SCMP_CMP(flag_arg, SCMP_CMP_MASKED_EQ, flag, flag));
  }
  if (seccomp_load(filter) != 0) ::_exit(98);
  seccomp_release(filter);
}
void RefuseLinkByDescriptor() { RefuseSyscall(SCMP_SYS(linkat), 4, AT_EMPTY_PATH, ENOENT); }
void RefuseEveryLink() { RefuseSyscall(SCMP_SYS(linkat), 0, 0, EPERM); }
void RefuseTmpfile() { RefuseSyscall(SCMP_SYS(openat), 2, O_TMPFILE & ~O_DIRECTORY, EOPNOTSUPP); }

TEST_F(FileOpsTest, WriteFallbacksReplaceTheFileToo) {
  for (auto setup : {RefuseLinkByDescriptor, RefuseEveryLink, RefuseTmpfile}) {
    WriteFile(Path("f"), "old", 0604);
    WorkerOutcome outcome = RunOp(json{{"op", "write"}, {"path", Path("f")}}, "new content", WorkerOptions{.child_setup = setup});
    ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
    EXPECT_EQ(ReadFile(Path("f")), "new content");
    EXPECT_EQ(ModeOf(Path("f")), 0604u);
    EXPECT_EQ(Names(dir_), std::set<std::string>{"f"});
  }
  // A failure with a named temporary file removes it.
  WorkerOutcome failed = RunOp(json{{"op", "write"}, {"path", Path("f")}}, std::string(256 * 1024, 'n'),
                               WorkerOptions{.file_size_limit = 64 * 1024, .child_setup = RefuseTmpfile});
  EXPECT_EQ(failed.Code(), "too_large");
  EXPECT_EQ(ReadFile(Path("f")), "new content");
  EXPECT_EQ(Names(dir_), std::set<std::string>{"f"});
}

TEST_F(FileOpsTest, WriteKeepsTheOwnerOfTheFileItReplaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to own files as another user";
  WriteFile(Path("owned"), "x");
  ASSERT_EQ(::chown(Path("owned").c_str(), 1234, 4321), 0);
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("owned")}}, "y").exit_code, 0);
  struct stat st;
  ASSERT_EQ(::stat(Path("owned").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 4321u);
}

TEST_F(FileOpsTest, OwnerGetsWhatAWriteOrMkdirCreates) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  auto owner_of = [&](const std::string& name) {
    struct stat st;
    EXPECT_EQ(::lstat(Path(name).c_str(), &st), 0) << name;
    return std::pair<uid_t, gid_t>(st.st_uid, st.st_gid);
  };
  const json owner = {{"uid", 1234}, {"gid", 4321}};
  const std::pair<uid_t, gid_t> given(1234, 4321), root(0, 0);
  fs::create_directories(Path("existing"));
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("existing/new/deeper/f")}, {"owner", owner}}, "x").exit_code, 0);
  EXPECT_EQ(owner_of("existing"), root);  // what was there stays as it was
  EXPECT_EQ(owner_of("existing/new"), given);
  EXPECT_EQ(owner_of("existing/new/deeper"), given);
  EXPECT_EQ(owner_of("existing/new/deeper/f"), given);
  // A file it replaces is given to the owner too (as envd chowns what it writes).
  WriteFile(Path("roots"), "r");
  ASSERT_EQ(::chmod(Path("roots").c_str(), 0600), 0);
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("roots")}, {"owner", owner}}, "y").exit_code, 0);
  EXPECT_EQ(owner_of("roots"), given);
  EXPECT_EQ(fs::status(Path("roots")).permissions(), fs::perms(0600));
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("appended")}, {"append", true}, {"owner", owner}}, "a").exit_code, 0);
  EXPECT_EQ(owner_of("appended"), given);
  ASSERT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("m/n")}, {"owner", owner}}).exit_code, 0);
  EXPECT_EQ(owner_of("m"), given);
  EXPECT_EQ(owner_of("m/n"), given);
  ASSERT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("single")}, {"parents", false}, {"owner", owner}}).exit_code, 0);
  EXPECT_EQ(owner_of("single"), given);
  // Without it, what the worker makes is its own.
  ASSERT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("plain")}}).exit_code, 0);
  EXPECT_EQ(owner_of("plain"), root);
  for (const json& bad : {json("1234"), json{{"uid", 1}}, json{{"uid", -1}, {"gid", 0}}}) {
    EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("bad")}, {"owner", bad}}).Code(), "invalid_argument") << bad;
  }
  EXPECT_FALSE(fs::exists(Path("bad")));
}

// ---- stat and list ----

TEST_F(FileOpsTest, StatReportsASymlinkWithoutFollowingIt) {
  fs::create_symlink("/nowhere/at/all", Path("dangling"));
  WorkerOutcome outcome = RunOp(json{{"op", "stat"}, {"path", Path("dangling")}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  json entry = outcome.Line();
  EXPECT_EQ(entry["type"], "symlink");
  EXPECT_EQ(entry["target"], "/nowhere/at/all");
  EXPECT_EQ(entry["name"], "dangling");

  // Paths are normalized.
  json dir_entry = RunOp(json{{"op", "stat"}, {"path", dir_ + "//./"}}).Line();
  EXPECT_EQ(dir_entry["path"], dir_);
  EXPECT_EQ(dir_entry["type"], "dir");
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", "/"}}).Line()["name"], "/");
}

TEST_F(FileOpsTest, ResolveLinksTellsWhereASymlinkLeads) {
  fs::create_directories(Path("d"));
  WriteFile(Path("d/x"), "x");
  ASSERT_EQ(::chmod(Path("d/x").c_str(), 0640), 0);
  fs::create_symlink("x", Path("d/rel"));
  fs::create_symlink("rel", Path("d/chain"));
  fs::create_symlink(Path("d"), Path("to-dir"));
  fs::create_symlink("nowhere", Path("d/dangling"));
  fs::create_symlink("loop", Path("d/loop"));
  auto stat = [&](const std::string& path, bool resolve) {
    return RunOp(json{{"op", "stat"}, {"path", path}, {"resolve_links", resolve}}).Line();
  };
  const std::string real_dir = fs::canonical(Path("d"));
  json rel = stat(Path("d/rel"), true);
  EXPECT_EQ(rel["type"], "symlink");
  EXPECT_EQ(rel["target"], "x");
  EXPECT_EQ(rel["resolved"], real_dir + "/x");
  EXPECT_EQ(rel["target_type"], "file");
  EXPECT_EQ(rel["target_mode"], 0640);
  EXPECT_EQ(stat(Path("d/chain"), true)["resolved"], real_dir + "/x");
  EXPECT_EQ(stat(Path("to-dir"), true)["target_type"], "dir");
  for (const char* name : {"d/dangling", "d/loop"}) {
    json nowhere = stat(Path(name), true);
    EXPECT_EQ(nowhere["type"], "symlink") << name;
    EXPECT_FALSE(nowhere.contains("resolved") || nowhere.contains("target_type") || nowhere.contains("target_mode"))
        << nowhere;
  }
  // Without the option, and for what is not a symlink, nothing of it.
  EXPECT_FALSE(stat(Path("d/rel"), false).contains("resolved"));
  EXPECT_FALSE(stat(Path("d/x"), true).contains("resolved"));
  // A listing says the same of its symlinks.
  json listing = RunOp(json{{"op", "list"}, {"path", Path("d")}, {"resolve_links", true}}).Line();
  std::map<std::string, json> by_name;
  for (const json& entry : listing["entries"]) by_name[entry["name"]] = entry;
  EXPECT_EQ(by_name["rel"]["resolved"], real_dir + "/x");
  EXPECT_FALSE(by_name["dangling"].contains("target_type"));
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", Path("d")}, {"resolve_links", "yes"}}).Code(), "invalid_argument");
  fs::remove(Path("d/loop"));  // the fixture's cleanup would trip over it
}

TEST_F(FileOpsTest, WriteSetsXattrsAndEntriesShowThoseUnderThePrefix) {
  const json write = {{"op", "write"}, {"path", Path("m")}, {"xattr_prefix", "user.t."},
                      {"xattrs", {{"author", "me"}, {"k", "v w"}}}};
  WorkerOutcome written = RunOp(write, "x");
  if (written.exit_code != 0 && written.Code() == "internal") GTEST_SKIP() << "no user xattrs here: " << written.err;
  ASSERT_EQ(written.exit_code, 0) << written.err;
  struct stat st;
  ASSERT_EQ(::stat(Path("m").c_str(), &st), 0);
  char value[16] = {};
  if (::getxattr(Path("m").c_str(), "user.t.author", value, sizeof value) < 0) GTEST_SKIP() << "no user xattrs here";
  EXPECT_STREQ(value, "me");
  EXPECT_EQ(written.Line()["xattrs"], (json{{"author", "me"}, {"k", "v w"}}));
  // Other namespaces are not shown; an Entry without any under the prefix has no "xattrs".
  ASSERT_EQ(::setxattr(Path("m").c_str(), "user.other", "o", 1, 0), 0);
  const json stat_op = {{"op", "stat"}, {"path", Path("m")}, {"xattr_prefix", "user.t."}};
  EXPECT_EQ(RunOp(stat_op).Line()["xattrs"], (json{{"author", "me"}, {"k", "v w"}}));
  EXPECT_FALSE(RunOp(json{{"op", "stat"}, {"path", Path("m")}}).Line().contains("xattrs"));
  // An overwrite is a new file: only what it sets.
  json again = write;
  again["xattrs"] = {{"new", "1"}};
  EXPECT_EQ(RunOp(again, "y").Line()["xattrs"], (json{{"new", "1"}}));
  json plain = write;
  plain.erase("xattrs");
  EXPECT_FALSE(RunOp(plain, "z").Line().contains("xattrs"));
  json listing = RunOp(json{{"op", "list"}, {"path", dir_}, {"xattr_prefix", "user.t."}}).Line();
  for (const json& entry : listing["entries"]) EXPECT_FALSE(entry.contains("xattrs")) << entry;
  // Bad ones are refused before anything is written.
  for (const json& bad : {json{{"", "v"}}, json{{"k", 1}}, json("x")}) {
    json op = {{"op", "write"}, {"path", Path("bad")}, {"xattr_prefix", "user.t."}, {"xattrs", bad}};
    EXPECT_EQ(RunOp(op, "x").Code(), "invalid_argument") << bad;
  }
  EXPECT_EQ(RunOp(json{{"op", "write"}, {"path", Path("bad")}, {"xattrs", {{"k", "v"}}}}, "x").Code(), "invalid_argument");
  EXPECT_FALSE(fs::exists(Path("bad")));
}

TEST_F(FileOpsTest, ADirectorysSizeIsTheSpaceItTakes) {
  fs::create_directories(Path("empty"));
  struct stat st;
  ASSERT_EQ(::stat(Path("empty").c_str(), &st), 0);
  json entry = RunOp(json{{"op", "stat"}, {"path", Path("empty")}}).Line();
  EXPECT_EQ(entry["size"], std::max<uint64_t>(uint64_t(st.st_blocks) * 512, uint64_t(st.st_blksize)));
  EXPECT_GT(entry["size"].get<uint64_t>(), 0u);
  WriteFile(Path("five"), "12345");
  EXPECT_EQ(RunOp(json{{"op", "stat"}, {"path", Path("five")}}).Line()["size"], 5);
}

TEST_F(FileOpsTest, ListWalksToTheDepthSortedAndNeverFollowsSymlinks) {
  fs::create_directories(Path("d/sub/deeper"));
  WriteFile(Path("d/b.txt"), "bb");
  WriteFile(Path("d/a-c"), "");
  WriteFile(Path("d/sub/x"), "x");
  WriteFile(Path("d/sub/deeper/y"), "y");
  fs::create_directories(Path("outside/inner"));
  fs::create_symlink(Path("outside"), Path("d/link"));

  auto list = [&](int depth) {
    WorkerOutcome outcome = RunOp(json{{"op", "list"}, {"path", Path("d")}, {"depth", depth}});
    EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
    json result = outcome.Line();
    EXPECT_EQ(result["truncated"], false);
    std::vector<std::string> paths;
    for (const auto& entry : result["entries"]) paths.push_back(entry["path"].get<std::string>().substr(Path("d").size()));
    return std::pair{paths, result};
  };
  auto [top, top_json] = list(1);
  EXPECT_EQ(top, (std::vector<std::string>{"/a-c", "/b.txt", "/link", "/sub"}));
  EXPECT_EQ(top_json["entries"][1]["size"], 2);
  EXPECT_EQ(top_json["entries"][2]["type"], "symlink");
  EXPECT_EQ(top_json["entries"][2]["target"], Path("outside"));
  EXPECT_EQ(list(2).first, (std::vector<std::string>{"/a-c", "/b.txt", "/link", "/sub", "/sub/deeper", "/sub/x"}));
  EXPECT_EQ(list(32).first,
            (std::vector<std::string>{"/a-c", "/b.txt", "/link", "/sub", "/sub/deeper", "/sub/deeper/y", "/sub/x"}));
  EXPECT_EQ(RunOp(json{{"op", "list"}, {"path", Path("missing")}}).Code(), "not_found");
}

TEST_F(FileOpsTest, ListStopsAtTheEntryLimit) {
  // More than kMaxListEntries entries: 101 directories of 990 files, on a tmpfs where
  // possible (a hundred thousand creates are slow on a journaling disk).
  std::string many = Path("many");
  ASSERT_EQ(::mkdir(many.c_str(), 0755), 0);
  bool mounted = ::mount("tmpfs", many.c_str(), "tmpfs", 0, "size=64m,nr_inodes=200k") == 0;
  ScopeGuard unmount([&] {
    if (mounted) ::umount2(many.c_str(), MNT_DETACH);
  });
  for (int d = 0; d < 101; ++d) {
    std::string sub = many + "/" + std::to_string(d);
    fs::create_directories(sub);
    for (int f = 0; f < 990; ++f) UniqueFd(::open((sub + "/" + std::to_string(f)).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  }
  WorkerOutcome outcome = RunOp(json{{"op", "list"}, {"path", Path("many")}, {"depth", 2}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  json result = outcome.Line();
  EXPECT_EQ(result["truncated"], true);
  EXPECT_EQ(result["entries"].size(), ctl::kMaxListEntries);
}

// ---- mkdir, move, remove ----

TEST_F(FileOpsTest, MkdirCreatesParentsAndAcceptsAnExistingDirectory) {
  WorkerOutcome outcome = RunOp(json{{"op", "mkdir"}, {"path", Path("x/y/z")}, {"mode", 0700}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(outcome.Line()["type"], "dir");
  EXPECT_EQ(ModeOf(Path("x/y/z")), 0700u);
  EXPECT_EQ(ModeOf(Path("x/y")), 0755u);
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("x/y/z")}}).exit_code, 0);
  EXPECT_EQ(ModeOf(Path("x/y/z")), 0700u);  // an existing directory is left as it is
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("x/y/z")}, {"parents", false}}).Code(), "exists");
  EXPECT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("p/q")}, {"parents", false}}).Code(), "not_found");
  ASSERT_EQ(RunOp(json{{"op", "mkdir"}, {"path", Path("p")}, {"parents", false}}).exit_code, 0);
  EXPECT_EQ(ModeOf(Path("p")), 0755u);
}

TEST_F(FileOpsTest, MoveRenamesAndReportsTheDestination) {
  WriteFile(Path("from"), "data");
  fs::create_directories(Path("dir/full"));
  WriteFile(Path("dir/full/f"), "");
  fs::create_directories(Path("empty"));
  WorkerOutcome outcome = RunOp(json{{"op", "move"}, {"from", Path("from")}, {"to", Path("dir/to")}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(outcome.Line()["path"], Path("dir/to"));
  EXPECT_EQ(ReadFile(Path("dir/to")), "data");
  EXPECT_FALSE(Exists(Path("from")));
  EXPECT_EQ(RunOp(json{{"op", "move"}, {"from", Path("from")}, {"to", Path("x")}}).Code(), "not_found");
  EXPECT_EQ(RunOp(json{{"op", "move"}, {"from", Path("empty")}, {"to", Path("dir")}}).Code(), "not_empty");
  EXPECT_EQ(RunOp(json{{"op", "move"}, {"from", Path("dir/to")}, {"to", Path("empty")}}).Code(), "is_a_directory");
  EXPECT_EQ(RunOp(json{{"op", "move"}, {"from", Path("dir")}, {"to", Path("dir/full/inside")}}).Code(), "invalid_argument");
  // The root (like a mount point) cannot be moved: EBUSY is the request's fault, not a 500.
  EXPECT_EQ(RunOp(json{{"op", "move"}, {"from", "/"}, {"to", "/"}}).Code(), "invalid_argument");
}

TEST_F(FileOpsTest, RemoveNeedsRecursiveForANonEmptyDirectory) {
  WriteFile(Path("file"), "");
  fs::create_directories(Path("empty"));
  fs::create_directories(Path("tree/a/b"));
  WriteFile(Path("tree/a/b/f"), "");
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("file")}}).exit_code, 0);
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("empty")}}).exit_code, 0);
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("tree")}}).Code(), "not_empty");
  EXPECT_TRUE(Exists(Path("tree/a/b/f")));
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("tree")}, {"recursive", true}}).exit_code, 0);
  EXPECT_EQ(Names(dir_), std::set<std::string>{});
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("tree")}}).Code(), "not_found");
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", "/"}, {"recursive", true}}).Code(), "invalid_argument");
}

TEST_F(FileOpsTest, RecursiveRemoveNeverFollowsSymlinks) {
  fs::create_directories(Path("outside"));
  WriteFile(Path("outside/precious"), "keep");
  fs::create_directories(Path("tree/sub"));
  fs::create_symlink(Path("outside"), Path("tree/link"));
  fs::create_symlink(Path("outside"), Path("tree/sub/link2"));
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("tree")}, {"recursive", true}}).exit_code, 0);
  EXPECT_FALSE(Exists(Path("tree")));
  EXPECT_EQ(ReadFile(Path("outside/precious")), "keep");

  // A symlink to a directory named as the path is removed itself.
  fs::create_symlink(Path("outside"), Path("top-link"));
  EXPECT_EQ(RunOp(json{{"op", "remove"}, {"path", Path("top-link")}, {"recursive", true}}).exit_code, 0);
  EXPECT_FALSE(Exists(Path("top-link")));
  EXPECT_EQ(ReadFile(Path("outside/precious")), "keep");
}

// ---- archives ----

TEST_F(FileOpsTest, ArchiveRoundTripKeepsTreeSymlinksAndModes) {
  std::string src = Path("src");
  fs::create_directories(src + "/bin");
  fs::create_directories(src + "/deep/er/est");
  WriteFile(src + "/bin/tool", "#!/bin/sh\necho hi\n", 0755);
  WriteFile(src + "/secret", "s", 0600);
  WriteFile(src + "/empty", "", 0644);
  WriteFile(src + "/h\xc3\xa9llo w\xc3\xb6rld.txt", "unicode", 0644);
  std::string big;
  for (int i = 0; big.size() < 2 * 1024 * 1024; ++i) big += std::to_string(i) + "\n";
  WriteFile(src + "/deep/er/est/big", big, 0640);
  WriteFile(src + "/deep/" + std::string(200, 'n'), "long name", 0644);
  fs::create_symlink("bin/tool", src + "/rel-link");
  fs::create_symlink("/etc/passwd", src + "/abs-link");
  fs::create_symlink("../../..", src + "/deep/up-link");
  ASSERT_EQ(::link((src + "/secret").c_str(), (src + "/hard").c_str()), 0);
  ASSERT_EQ(::mkfifo((src + "/fifo").c_str(), 0644), 0);  // skipped
  ASSERT_EQ(::chmod((src + "/deep/er").c_str(), 0750), 0);
  ASSERT_EQ(::chmod((src + "/deep/er/est").c_str(), 0555), 0);  // read-only, yet filled on extract
  struct timespec times[2] = {{0, UTIME_OMIT}, {1600000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (src + "/deep/er/est").c_str(), times, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, (src + "/secret").c_str(), times, 0), 0);

  WorkerOutcome created = RunOp(json{{"op", "archive_create"}, {"path", src}});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::vector<std::string> names = TarNames(created.out);
  EXPECT_EQ(std::count(names.begin(), names.end(), "fifo"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "bin/tool"), 1);
  for (const auto& name : names) EXPECT_NE(name[0], '/') << name;

  WorkerOutcome extracted = RunOp(json{{"op", "archive_extract"}, {"path", Path("dst/inner")}}, created.out);
  ASSERT_EQ(extracted.exit_code, 0) << extracted.err;
  EXPECT_EQ(extracted.Line()["entries"], names.size());
  EXPECT_EQ(extracted.Line()["bytes"], big.size() + 1 + 1 + 7 + 9 + 18);  // hard links as plain files

  ::unlink((src + "/fifo").c_str());
  auto expected = Snapshot(src);
  auto actual = Snapshot(Path("dst/inner"));
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(ModeOf(Path("dst/inner/deep/er/est")), 0555u);
  EXPECT_EQ(fs::read_symlink(Path("dst/inner/abs-link")), "/etc/passwd");

  // A single file is archived under its own name.
  WorkerOutcome single = RunOp(json{{"op", "archive_create"}, {"path", src + "/secret"}});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(TarNames(single.out), std::vector<std::string>{"secret"});
}

TEST_F(FileOpsTest, ArchiveCreateCanLeaveOutWhatIsMountedBelow) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount";
  const std::string src = Path("mounted");
  fs::create_directories(src + "/own");
  fs::create_directories(src + "/proc");
  WriteFile(src + "/own/file", "kept", 0644);
  WriteFile(src + "/hosts", "the image's", 0644);
  WriteFile(Path("outside"), "bound", 0644);
  if (::mount("tmpfs", (src + "/proc").c_str(), "tmpfs", 0, "size=64k") != 0) GTEST_SKIP() << "cannot mount tmpfs here";
  ScopeGuard unmount_dir([&] { ::umount2((src + "/proc").c_str(), MNT_DETACH); });
  WriteFile(src + "/proc/inside", "mounted", 0644);
  ASSERT_EQ(::mount(Path("outside").c_str(), (src + "/hosts").c_str(), nullptr, MS_BIND, nullptr), 0);
  ScopeGuard unmount_file([&] { ::umount2((src + "/hosts").c_str(), MNT_DETACH); });

  WorkerOutcome all = RunOp(json{{"op", "archive_create"}, {"path", src}});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::vector<std::string> names = TarNames(all.out);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            (std::set<std::string>{"own/", "own/file", "proc/", "proc/inside", "hosts"}));
  WorkerOutcome own = RunOp(json{{"op", "archive_create"}, {"path", src}, {"one_file_system", true}});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  names = TarNames(own.out);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), (std::set<std::string>{"own/", "own/file"}));
}

TEST_F(FileOpsTest, ExtractGivesEveryEntryToTheOwnerAsked) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to own files as another user";
  std::string tar = BuildTar({{.name = "dir", .type = AE_IFDIR, .perm = 0755},
                              {.name = "dir/tool", .data = "#!/bin/sh\n", .perm = 04755},
                              {.name = "link", .type = AE_IFLNK, .link = "dir/tool"}});
  const std::string dest = Path("owned");
  WorkerOutcome outcome =
      RunOp(json{{"op", "archive_extract"}, {"path", dest}, {"owner", {{"uid", 1234}, {"gid", 5678}}}}, tar);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  for (const char* name : {"dir", "dir/tool", "link"}) {
    struct stat st;
    ASSERT_EQ(::lstat((dest + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, 1234u) << name;
    EXPECT_EQ(st.st_gid, 5678u) << name;
  }
  EXPECT_EQ(ModeOf(dest + "/dir/tool"), 04755u);  // the mode after the owner: set-id bits kept
}

TEST_F(FileOpsTest, ExtractAcceptsCompressedArchives) {
  for (const char* filter : {"gzip", "bzip2", "xz"}) {
    std::string tar = BuildTar({{.name = "dir", .type = AE_IFDIR, .perm = 0700},
                                {.name = "dir/file", .data = std::string("compressed ") + filter, .perm = 0600},
                                {.name = "link", .type = AE_IFLNK, .link = "dir/file"},
                                {.name = "hard", .link = "dir/file", .hardlink = true}},
                               filter);
    std::string dest = Path(filter);
    WorkerOutcome outcome = RunOp(json{{"op", "archive_extract"}, {"path", dest}}, tar);
    ASSERT_EQ(outcome.exit_code, 0) << filter << ": " << outcome.err;
    EXPECT_EQ(outcome.Line()["entries"], 4);
    EXPECT_EQ(ReadFile(dest + "/dir/file"), std::string("compressed ") + filter);
    EXPECT_EQ(ReadFile(dest + "/link"), std::string("compressed ") + filter);
    EXPECT_EQ(ReadFile(dest + "/hard"), std::string("compressed ") + filter);
    EXPECT_EQ(fs::hard_link_count(dest + "/hard"), 2u);
    EXPECT_EQ(ModeOf(dest + "/dir"), 0700u);
    EXPECT_EQ(ModeOf(dest + "/dir/file"), 0600u);
  }
  EXPECT_EQ(RunOp(json{{"op", "archive_extract"}, {"path", Path("junk")}}, "this is not a tar archive at all").Code(),
            "invalid_argument");
}

TEST_F(FileOpsTest, HostileArchivesAreRefusedAndNothingOutsideChanges) {
  std::string outside = Path("outside");
  fs::create_directories(outside);
  WriteFile(outside + "/victim", "untouched");
  std::string passwd_before = ReadFile("/etc/passwd");
  struct Case {
    const char* what;
    std::vector<TarEntry> entries;
  };
  std::vector<Case> cases = {
      {"dot-dot", {{.name = "ok.txt", .data = "ok"}, {.name = "../outside/escape", .data = "x"}}},
      {"dot-dot inside", {{.name = "a/../../outside/escape", .data = "x"}}},
      {"absolute", {{.name = outside + "/escape", .data = "x"}}},
      {"symlink then through it",
       {{.name = "a", .type = AE_IFLNK, .link = outside}, {.name = "a/escape", .data = "x"}}},
      {"symlink then a directory through it",
       {{.name = "a", .type = AE_IFLNK, .link = outside}, {.name = "a/newdir", .type = AE_IFDIR}}},
      {"symlink to .. then through it",
       {{.name = "up", .type = AE_IFLNK, .link = ".."}, {.name = "up/outside/escape", .data = "x"}}},
      {"symlink deeper then through it",
       {{.name = "d/e", .type = AE_IFDIR},
        {.name = "d/e/up", .type = AE_IFLNK, .link = "../../.."},
        {.name = "d/e/up/outside/victim", .data = "overwritten"}}},
      {"hard link to /etc/passwd", {{.name = "h", .link = "/etc/passwd", .hardlink = true}}},
      {"hard link leaving", {{.name = "h", .link = "../outside/victim", .hardlink = true}}},
      {"hard link to no earlier entry", {{.name = "h", .link = "victim", .hardlink = true}}},
      {"hard link through a symlink",
       {{.name = "a", .type = AE_IFLNK, .link = outside}, {.name = "h", .link = "a/victim", .hardlink = true}}},
      {"character device", {{.name = "null", .type = AE_IFCHR}}},
      {"fifo", {{.name = "pipe", .type = AE_IFIFO}}},
  };
  for (const auto& c : cases) {
    std::string dest = Path(std::string("dest-") + std::to_string(&c - cases.data()));
    WorkerOutcome outcome = RunOp(json{{"op", "archive_extract"}, {"path", dest}}, BuildTar(c.entries));
    EXPECT_EQ(outcome.exit_code, 1) << c.what;
    EXPECT_EQ(outcome.Code(), "invalid_argument") << c.what << ": " << outcome.err;
    EXPECT_EQ(Names(outside), std::set<std::string>{"victim"}) << c.what;
    EXPECT_EQ(ReadFile(outside + "/victim"), "untouched") << c.what;
    EXPECT_EQ(fs::hard_link_count(outside + "/victim"), 1u) << c.what;
    EXPECT_FALSE(Exists(dest + "/h")) << c.what;
    EXPECT_FALSE(Exists(Path("escape"))) << c.what;
  }
  EXPECT_EQ(ReadFile("/etc/passwd"), passwd_before);
  EXPECT_EQ(ReadFile(Path("dest-0/ok.txt")), "ok");  // entries before the refused one stay

  // A symlink entry followed by a file of the same name replaces the symlink, not its target.
  std::string tar = BuildTar({{.name = "a", .type = AE_IFLNK, .link = outside + "/victim"}, {.name = "a", .data = "mine"}});
  WorkerOutcome replaced = RunOp(json{{"op", "archive_extract"}, {"path", Path("replace")}}, tar);
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_EQ(ReadFile(Path("replace/a")), "mine");
  EXPECT_FALSE(fs::is_symlink(Path("replace/a")));
  EXPECT_EQ(ReadFile(outside + "/victim"), "untouched");

  // A symlink already in the target directory is not followed either.
  fs::create_directories(Path("pre"));
  fs::create_symlink(outside, Path("pre/a"));
  WorkerOutcome pre = RunOp(json{{"op", "archive_extract"}, {"path", Path("pre")}}, BuildTar({{.name = "a/victim", .data = "x"}}));
  EXPECT_EQ(pre.Code(), "invalid_argument");
  EXPECT_EQ(ReadFile(outside + "/victim"), "untouched");
}

// ---- watch ----

// Reads watch events until one matches (type, path); false if the stream ends first.
bool AwaitEvent(Worker& worker, const std::string& type, const std::string& path, std::vector<json>* seen = nullptr) {
  while (auto line = worker.ReadLine()) {
    json event = json::parse(*line, nullptr, false);
    if (seen) seen->push_back(event);
    if (event["type"] == type && event["path"] == path) return true;
  }
  return false;
}

json NextEvent(Worker& worker) {
  auto line = worker.ReadLine();
  return line ? json::parse(*line, nullptr, false) : json("(no event)");
}

json Event(const std::string& type, const std::string& path, bool dir) {
  return json{{"type", type}, {"path", path}, {"dir", dir}};
}

TEST_F(FileOpsTest, WatchReportsEventsInNewNestedDirectories) {
  fs::create_directories(Path("w/existing"));
  Worker worker(json{{"op", "watch"}, {"path", Path("w")}});
  ASSERT_EQ(worker.ReadLine(), R"({"type":"ready"})");

  // Existing subdirectories are watched from the start.
  WritePlain(Path("w/existing/f"), "1");
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/existing/f"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/existing/f"), false));

  // A new directory: once its create is reported, it is watched.
  ASSERT_EQ(::mkdir(Path("w/new").c_str(), 0755), 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/new"), true));
  ASSERT_EQ(::mkdir(Path("w/new/nested").c_str(), 0755), 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/new/nested"), true));
  WritePlain(Path("w/new/nested/file"), "data");
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/new/nested/file"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/new/nested/file"), false));
  ASSERT_EQ(::chmod(Path("w/new/nested/file").c_str(), 0600), 0);
  EXPECT_EQ(NextEvent(worker), Event("chmod", Path("w/new/nested/file"), false));
  ASSERT_EQ(::rename(Path("w/new/nested/file").c_str(), Path("w/new/nested/moved").c_str()), 0);
  EXPECT_EQ(NextEvent(worker), Event("rename", Path("w/new/nested/file"), false));
  EXPECT_EQ(NextEvent(worker), Event("rename", Path("w/new/nested/moved"), false));
  ASSERT_EQ(::unlink(Path("w/new/nested/moved").c_str()), 0);
  EXPECT_EQ(NextEvent(worker), Event("remove", Path("w/new/nested/moved"), false));
  ASSERT_EQ(::rmdir(Path("w/new/nested").c_str()), 0);
  EXPECT_EQ(NextEvent(worker), Event("remove", Path("w/new/nested"), true));

  // A tree made at once: whatever appeared before its watches is reported by the scan.
  fs::create_directories(Path("w/a/b/c"));
  std::vector<json> seen;
  ASSERT_TRUE(AwaitEvent(worker, "create", Path("w/a/b/c"), &seen));
  for (const auto& event : seen) EXPECT_EQ(event["type"], "create") << event;
  WritePlain(Path("w/a/b/c/deep"), "x");
  ASSERT_TRUE(AwaitEvent(worker, "write", Path("w/a/b/c/deep")));
  // The scan and inotify may both report parts of that tree, the scan's copies late (seen
  // under load): a marker written after it drains them before the exact checks below.
  WritePlain(Path("w/marker"), "m");
  ASSERT_TRUE(AwaitEvent(worker, "write", Path("w/marker")));

  // Made while the worker is stopped, so all of it exists before the new directory's watch:
  // the scan reports it, the file with content also as written.
  ASSERT_EQ(::kill(worker.pid(), SIGSTOP), 0);
  fs::create_directories(Path("w/quick/deeper"));
  WritePlain(Path("w/quick/deeper/file"), "content");
  ASSERT_EQ(::kill(worker.pid(), SIGCONT), 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/quick"), true));
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/quick/deeper"), true));
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/quick/deeper/file"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/quick/deeper/file"), false));

  // A directory moved within the tree keeps its watches under the new name.
  ASSERT_EQ(::rename(Path("w/a").c_str(), Path("w/z").c_str()), 0);
  EXPECT_EQ(NextEvent(worker), Event("rename", Path("w/a"), true));
  EXPECT_EQ(NextEvent(worker), Event("rename", Path("w/z"), true));
  WritePlain(Path("w/z/b/c/after"), "x");
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/z/b/c/after"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/z/b/c/after"), false));
  // One moved out of the tree loses them: what happens in it is not reported, at once.
  ASSERT_EQ(::rename(Path("w/z").c_str(), Path("gone").c_str()), 0);
  EXPECT_EQ(NextEvent(worker), Event("rename", Path("w/z"), true));
  WritePlain(Path("gone/b/c/later"), "x");
  WritePlain(Path("w/marker2"), "m");
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/marker2"), false));

  // Closing stdout ends the watch.
  worker.CloseStdout();
  EXPECT_EQ(worker.Wait(), 0);
}

TEST_F(FileOpsTest, WatchReportsAnApiWriteAsCreateAndWriteOfItsTarget) {
  fs::create_directories(Path("w"));
  WritePlain(Path("w/old"), "before");
  Worker worker(json{{"op", "watch"}, {"path", Path("w")}});
  ASSERT_EQ(worker.ReadLine(), R"({"type":"ready"})");
  // A new file and a replaced one: the temporary the content was built in never shows.
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("w/new")}}, "fresh").exit_code, 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/new"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/new"), false));
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("w/old")}}, "after").exit_code, 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/old"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/old"), false));
  // A file of the user's own named like an unnamed temporary is still reported.
  WritePlain(Path("w/#123"), "x");
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/#123"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/#123"), false));
  worker.CloseStdout();
  EXPECT_EQ(worker.Wait(), 0);
}

TEST_F(FileOpsTest, WatchReportsAWriteGivenToAnOwnerAsEnvdsUpload) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  fs::create_directories(Path("w"));
  Worker worker(json{{"op", "watch"}, {"path", Path("w")}});
  ASSERT_EQ(worker.ReadLine(), R"({"type":"ready"})");
  const json owner = {{"uid", 1234}, {"gid", 4321}};
  // envd creates the file, chowns it, writes it; an overwrite is a chown and a write.
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("w/new")}, {"owner", owner}}, "fresh").exit_code, 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/new"), false));
  EXPECT_EQ(NextEvent(worker), Event("chmod", Path("w/new"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/new"), false));
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("w/new")}, {"owner", owner}}, "again").exit_code, 0);
  EXPECT_EQ(NextEvent(worker), Event("chmod", Path("w/new"), false));
  EXPECT_EQ(NextEvent(worker), Event("write", Path("w/new"), false));
  // Its new parent: created, then given to the owner. (The scan of the new directory may find
  // the file before the parent's watch reports the chown: file_watch.cc keeps no order
  // between the two.)
  ASSERT_EQ(RunOp(json{{"op", "write"}, {"path", Path("w/d/f")}, {"owner", owner}}, "x").exit_code, 0);
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/d"), true));
  const json chmod = Event("chmod", Path("w/d"), true);
  std::vector<json> seen;
  for (int i = 0; i < 4 && (seen.empty() || seen.back() != chmod); ++i) seen.push_back(NextEvent(worker));
  EXPECT_EQ(seen.back(), chmod) << json(seen).dump();
  for (const json& event : seen) EXPECT_TRUE(event == chmod || event["path"] == Path("w/d/f")) << event.dump();
  worker.CloseStdout();
  EXPECT_EQ(worker.Wait(), 0);
}

TEST_F(FileOpsTest, WatchWithEntriesDescribesWhatIsThere) {
  fs::create_directories(Path("w"));
  Worker worker(json{{"op", "watch"}, {"path", Path("w")}, {"entries", true}, {"allow_network_mounts", false}});
  ASSERT_EQ(worker.ReadLine(), R"({"type":"ready"})");
  WritePlain(Path("w/f"), "12345");
  json created = NextEvent(worker);
  EXPECT_EQ(created["type"], "create");
  EXPECT_EQ(created["entry"]["path"], Path("w/f"));
  json written = NextEvent(worker);
  EXPECT_EQ(written["type"], "write");
  EXPECT_EQ(written["entry"]["size"], 5);
  ASSERT_EQ(::unlink(Path("w/f").c_str()), 0);
  json removed = NextEvent(worker);
  EXPECT_EQ(removed["type"], "remove");
  EXPECT_FALSE(removed.contains("entry")) << removed;
  worker.CloseStdout();
  EXPECT_EQ(worker.Wait(), 0);
  // Without the option, no entries.
  Worker plain(json{{"op", "watch"}, {"path", Path("w")}});
  ASSERT_EQ(plain.ReadLine(), R"({"type":"ready"})");
  WritePlain(Path("w/g"), "x");
  EXPECT_FALSE(NextEvent(plain).contains("entry"));
  plain.CloseStdout();
  EXPECT_EQ(plain.Wait(), 0);
}

TEST_F(FileOpsTest, WatchWithoutRecursiveSeesOnlyTheDirectory) {
  fs::create_directories(Path("w/sub"));
  Worker worker(json{{"op", "watch"}, {"path", Path("w")}, {"recursive", false}});
  ASSERT_EQ(worker.ReadLine(), R"({"type":"ready"})");
  WritePlain(Path("w/sub/ignored"), "x");
  ASSERT_EQ(::mkdir(Path("w/seen").c_str(), 0755), 0);
  // Events arrive in order: had the first been reported, it would come first.
  EXPECT_EQ(NextEvent(worker), Event("create", Path("w/seen"), true));
}

TEST_F(FileOpsTest, WatchOfAFileAndOfAMissingPath) {
  WritePlain(Path("single"), "x");
  EXPECT_EQ(RunOp(json{{"op", "watch"}, {"path", Path("missing")}}).Code(), "not_found");
  Worker worker(json{{"op", "watch"}, {"path", Path("single")}});
  ASSERT_EQ(worker.ReadLine(), R"({"type":"ready"})");
  WritePlain(Path("single"), "y");
  EXPECT_EQ(NextEvent(worker), Event("write", Path("single"), false));
  ASSERT_EQ(::unlink(Path("single").c_str()), 0);
  // The watched path itself gone: a last remove (after its attribute change), then the end.
  ASSERT_TRUE(AwaitEvent(worker, "remove", Path("single")));
  WorkerOutcome outcome = worker.Finish();
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
}

// A user namespace of its own whose inotify watch limit is 2 (limits are per namespace).
void LimitWatchesToTwo() {
  UniqueFd limit;
  if (::unshare(CLONE_NEWUSER) == 0) limit.reset(::open("/proc/sys/user/max_inotify_watches", O_WRONLY | O_CLOEXEC));
  if (!limit || ::write(limit.get(), "2", 1) != 1) ::_exit(97);
}

TEST_F(FileOpsTest, WatchBeyondTheWatchLimitIsTooLarge) {
  fs::create_directories(Path("w/a"));
  fs::create_directories(Path("w/b"));
  fs::create_directories(Path("w/c"));
  WorkerOutcome outcome = RunOp(json{{"op", "watch"}, {"path", Path("w")}}, "", WorkerOptions{.child_setup = LimitWatchesToTwo});
  if (outcome.exit_code == 97) GTEST_SKIP() << "cannot lower the inotify limit in a user namespace here";
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.Code(), "too_large") << outcome.err;
  EXPECT_NE(outcome.err.find("too many directories to watch"), std::string::npos) << outcome.err;
  EXPECT_EQ(outcome.out, "");  // never ready
}

TEST_F(FileOpsTest, ConnectCarriesBothWaysWhileTheApplicationSendsBeforeItReads) {
  // An application that sends more than the sockets hold before it reads a byte: a worker
  // that blocked sending to it would stop reading its answer, and both would wait for good.
  constexpr size_t kBytes = 32 << 20;
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &size), 0);
  size_t received = 0;
  std::thread application([&] {
    UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    const std::string piece(1 << 20, 'a');
    for (size_t sent = 0; sent < kBytes;) {
      ssize_t n = ::send(conn.get(), piece.data(), piece.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += size_t(n);
    }
    char buf[65536];
    ssize_t n;
    while ((n = ::recv(conn.get(), buf, sizeof buf, 0)) > 0) received += size_t(n);
  });
  WorkerOutcome outcome = RunOp(json{{"op", "connect"}, {"port", ntohs(address.sin_port)}}, std::string(kBytes, 'b'));
  application.join();
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(outcome.out.size(), kBytes + 1);
  EXPECT_EQ(outcome.out.substr(0, 1), std::string(1, ctl::kConnectReady));
  EXPECT_EQ(received, kBytes);
}

// ---- through bulkhead-init ----

struct InitOutcome {
  bool started = false;
  std::string out, err;
  std::optional<json> exit, error;
};

InitOutcome RunThroughInit(const std::string& socket_path, const json& request, const std::string& input = {}) {
  init_testing::Client client(socket_path);
  EXPECT_TRUE(client.connected());
  client.Send(ctl::kExec, request.dump());
  if (request.value("stdin", false)) {
    for (size_t off = 0; off < input.size(); off += 60000) client.Send(ctl::kStdin, input.substr(off, 60000));
    client.Send(ctl::kStdinClose);
  }
  InitOutcome outcome;
  while (auto frame = client.Read()) {
    if (frame->type == ctl::kStarted) outcome.started = true;
    if (frame->type == ctl::kStdout) outcome.out += frame->payload;
    if (frame->type == ctl::kStderr) outcome.err += frame->payload;
    if (frame->type == ctl::kExit) outcome.exit = json::parse(frame->payload);
    if (frame->type == ctl::kError) outcome.error = json::parse(frame->payload);
    if (outcome.exit || outcome.error) break;
  }
  return outcome;
}

TEST_F(FileOpsTest, FileOperationsRunThroughInit) {
  init_testing::RunningInit init;
  std::string problem = init.Start(dir_);
  ASSERT_EQ(problem, "");
  ScopeGuard stop([&] { init.Stop(); });

  std::string content(300000, 'c');
  InitOutcome written = RunThroughInit(
      init.socket_path(), json{{"file_op", {{"op", "write"}, {"path", Path("via/init.txt")}, {"mode", 0640}}}, {"stdin", true}},
      content);
  EXPECT_TRUE(written.started);
  ASSERT_TRUE(written.exit);
  EXPECT_EQ((*written.exit)["exit_code"], 0) << written.err;
  EXPECT_EQ(json::parse(written.out)["size"], content.size());
  EXPECT_EQ(ModeOf(Path("via/init.txt")), 0640u);

  InitOutcome read = RunThroughInit(init.socket_path(), json{{"file_op", {{"op", "read"}, {"path", Path("via/init.txt")}}}});
  ASSERT_TRUE(read.exit);
  EXPECT_EQ((*read.exit)["exit_code"], 0);
  EXPECT_TRUE(read.out == "{\"size\":300000}\n" + content);

  InitOutcome missing = RunThroughInit(init.socket_path(), json{{"file_op", {{"op", "stat"}, {"path", Path("nope")}}}});
  ASSERT_TRUE(missing.exit);
  EXPECT_EQ((*missing.exit)["exit_code"], 1);
  EXPECT_EQ(json::parse(missing.err)["code"], "not_found");

  // The worker takes the request's user: nobody cannot write into root's directory.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    InitOutcome denied = RunThroughInit(
        init.socket_path(),
        json{{"file_op", {{"op", "write"}, {"path", Path("via/denied")}}}, {"stdin", true}, {"user", "65534"}}, "x");
    ASSERT_TRUE(denied.exit);
    EXPECT_EQ((*denied.exit)["exit_code"], 1);
    EXPECT_EQ(json::parse(denied.err)["code"], "permission_denied") << denied.err;
    EXPECT_FALSE(Exists(Path("via/denied")));
  }

  // An archive round trip through init, with its gzip support linked statically.
  WriteFile(Path("via/h\xc3\xa9llo"), "accent", 0600);
  fs::create_symlink("init.txt", Path("via/link"));
  InitOutcome tar = RunThroughInit(init.socket_path(), json{{"file_op", {{"op", "archive_create"}, {"path", Path("via")}}}});
  ASSERT_TRUE(tar.exit);
  ASSERT_EQ((*tar.exit)["exit_code"], 0) << tar.err;
  InitOutcome unpacked = RunThroughInit(
      init.socket_path(), json{{"file_op", {{"op", "archive_extract"}, {"path", Path("copy")}}}, {"stdin", true}}, tar.out);
  ASSERT_TRUE(unpacked.exit);
  EXPECT_EQ((*unpacked.exit)["exit_code"], 0) << unpacked.err;
  EXPECT_EQ(Snapshot(Path("copy")), Snapshot(Path("via")));
  std::string gzipped = BuildTar({{.name = "z.txt", .data = "zipped"}}, "gzip");
  InitOutcome gunzip = RunThroughInit(
      init.socket_path(), json{{"file_op", {{"op", "archive_extract"}, {"path", Path("gz")}}}, {"stdin", true}}, gzipped);
  ASSERT_TRUE(gunzip.exit);
  EXPECT_EQ((*gunzip.exit)["exit_code"], 0) << gunzip.err;
  EXPECT_EQ(ReadFile(Path("gz/z.txt")), "zipped");
}

}  // namespace
}  // namespace bulkhead::init
