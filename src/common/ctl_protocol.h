// The control protocol between the daemon and a sandbox's init (PID 1).
//
// Transport: a SOCK_STREAM unix socket. The daemon creates and binds the listening
// socket on the host (<state>/sandboxes/<id>/ctl.sock) and hands it to init as fd 3. Under
// gVisor, whose checkpoint cannot save a bound host socket, the roles of connecting swap: the
// daemon listens in the sandbox's control directory (kDaemonSocketName), init dials it
// (--host-uds=open) and hides the directory (init/self_contain.h), and the daemon takes a
// connection init dialed for each request. Sandbox processes never see either path. One
// connection carries one request, the daemon sending the first frame either way. (fd 4 is
// the workload cgroup's cgroup.procs: kWorkloadCgroupFd.)
//
// Framing: every message is a frame
//     u32 length (little endian, counts the type byte and the payload) | u8 type | payload
// Payloads marked (json) are a UTF-8 JSON object; (bytes) are raw.
//
// A connection's first frame says what it is for:
//   kExec      a command (foreground: the connection lives as long as the command),
//              a background process (registered, then the connection ends) or a file
//              operation (run by a worker that init forks; see "File operations").
//   kProcList  list init's process table.
//   kProcAttach  read a background process's output and/or drive it (stdin, signals, size).
//   kPing      health check.
//   kSudoUsers who may use the sandbox's sudo.
//   kLimits    the limits init enforces in the sandbox's own kernel.
//   kReclaim   the sandbox ran out of memory: kill its largest process.
//   kFreeze    stop or resume the workload inside, before the host freezes the sandbox.
//
// daemon -> init
//   kExec      (json) {"argv": [..], "env": ["K=V", ..], "cwd": "/workspace",
//                      "user": "root" | "1000" | "1000:1000", "timeout_ms": 0,
//                      "stdin": true|false, "output_limit": 16777216,
//                      "background": false, "tag": "dev-server",
//                      "pty": {"cols": 80, "rows": 24}, "nofile": 12288,
//                      "file_op": {"op": "read", ...}}
//              "env" is complete except that init fills PATH, HOME, USER, LOGNAME and TERM
//              where absent (TERM=xterm-256color with a pty). If "stdin" is false the
//              command's stdin is /dev/null; otherwise kStdin frames follow, ended by
//              kStdinClose. With "pty" the command runs on a new pseudo-terminal (its
//              controlling tty; stdin, stdout and stderr all on it) and all output is kStdout.
//              With "background": true the command is registered in init's process table
//              (stdin always open, output kept in the process's ring), init answers
//              kStarted and ends the connection; the process lives on until it exits, is
//              signalled or the sandbox goes away. "tag" is kept in the table as given.
//              With "background" and "attach": true the connection does not end: after
//              kStarted it goes on as a kProcAttach {"output", "follow", "hold": true} of the
//              new process from offset 0 (kAttached, its output, kExit; control frames).
//              With "file_op" there is no "argv": see "File operations".
//              "output_limit" (foreground): init sends at most output_limit + 1 bytes of each
//              stream (the extra byte says there was more) and reads and drops the rest, so
//              a flood the daemon would drop anyway costs the sandbox, not the daemon.
//              "nofile": the command's RLIMIT_NOFILE, soft and hard (runtime/cgroup.h
//              sizes it to the sandbox's memory); absent, the command keeps init's.
//   kStdin     (bytes) data for the command's stdin
//   kStdinClose ()     close the command's stdin
//   kSignal    (json) {"signal": 15} send a signal to the command's process group
//   kResize    (json) {"cols": 120, "rows": 40}  set the pty's size (TIOCSWINSZ); ignored
//              without a pty
//   kPing      ()     init answers kPong. As a first frame: a health check. On an attach
//              connection: a barrier (every frame sent before it has been applied).
//   kProcList  ()     init answers kResult {"processes": [Process...]} and ends the connection.
//   kSudoUsers (json) {"users": ["user", "1000"]}  names or uids (at most kMaxSudoUsers) that
//              may use the sudo socket (init/sudo_protocol.h). The first creates the socket;
//              a later one replaces the list. A sandbox boots without one (so pooled sandboxes
//              are all alike): the daemon sends it after each boot, and when it hands a pooled
//              sandbox to a spec with sudo users. init answers kResult {} and ends the
//              connection, or kError (invalid_argument; internal: no socket could be made).
//   kLimits    (json) {"pids": 512, "memory_bytes": 1073741824, "cpus": 1.0}  the sandbox's
//              limits, where init made its cgroups itself in the sandbox's own kernel
//              (init/self_contain.h: tiers whose kernel is not the host's): the workload's pids
//              limit (enforced there), and the memory and CPU limits its programs read there (the
//              host enforces those). The daemon sends it after each boot and each change of
//              limits. init answers kResult {} and ends the connection, or kError
//              invalid_argument (a bad value, or an init whose cgroups are the host's).
//   kReclaim   ()     the sandbox ran out of memory, where its tier keeps the host's OOM killer
//              away (runtime/memory_watch.h): init SIGKILLs the process with the largest
//              resident set but itself, as the kernel's OOM killer would, and answers kResult
//              {"killed": 12, "resident_bytes": N}, or {} when there is none; then ends the
//              connection.
//   kFreeze    (json) {"frozen": true}  where init made its cgroups in the sandbox's own kernel
//              and that kernel has a freezer (microvm): every process of the workload stops
//              (true) or goes on (false). A write system call that its kernel sends to the
//              host as several requests (virtio-fs splits one at a page not yet read) is
//              finished before its process stops, so the host's freeze that follows never cuts
//              one in half. init waits up to 1 s for the workload to stop, then answers kResult
//              {"settled": true | false} (false: a process still runs in the kernel; it stops
//              when it leaves) and ends the connection; kError invalid_argument where it has no
//              freezer. A thaw may carry {"realtime_ns": N, "entropy": "<64 hex digits>"}: the
//              host's wall clock and random bytes, which a guest's init sets as its clock and
//              mixes into its random generator (init/guest_boot.h SetGuestClock): its clock
//              stood still while it was held, and a restored memory image's is the image's.
//   kProcAttach (json) {"pid": 12, "output": true, "follow": false,
//                       "stdout_offset": 0, "stderr_offset": 0}
//              Unknown pid: kError not_found. Otherwise kAttached, then (with "output")
//              the process's output from the given offsets: kStdout/kStderr frames in the
//              order it was produced. Without "follow": once what the ring holds was sent,
//              kExit if the process has exited, else kEnd; then the connection ends. With
//              "follow": new output as it arrives, and kExit once the process exited and all
//              its output was sent. Meanwhile the daemon may send kStdin, kStdinClose,
//              kSignal, kResize and kPing on the same connection; they apply to that process
//              (kStdin to a process whose stdin is closed, or that exited, is dropped). Closing
//              an attach connection never affects the process.
//              "hold": true (with "output" and "follow"): this follower must not miss output.
//              While it is kProcessRingBytes/4 behind, init stops reading the process's
//              output (the process blocks writing) instead of dropping bytes it was not sent.
//
// init -> daemon
//   kStarted   (json) {"pid": 12}   the command was exec'd (pid as seen in the sandbox);
//              for a background process: {"pid": 12, "process": Process}
//   kStdout    (bytes)
//   kStderr    (bytes)
//   kExit      (json) {"exit_code": 0 | null, "signal": null | 9, "timed_out": false,
//                      "duration_ms": 3.1}
//              Last frame. Sent after the process exited and its stdout/stderr reached EOF,
//              or 100 ms after it exited if a descendant still holds them open.
//   kError     (json) {"code": "not_found" | "invalid_argument" | "internal", "message": ".."}
//              The command could not be started (cwd or user missing, bad request).
//              Last frame. A missing executable is NOT an error: it is kStarted followed by
//              kStderr "bulkhead: exec <argv0>: <strerror>" and kExit with exit_code 127
//              (126 for a permission problem), as a shell would report it.
//   kPong      ()
//   kResult    (json) the answer to kProcList, kSudoUsers, kLimits, kReclaim or kFreeze. Last
//              frame.
//   kAttached  (json) {"process": Process, "stdout_offset": N, "stderr_offset": M}
//              the offsets where the output that follows starts: the requested ones, or
//              later ones if the ring no longer holds those bytes (the client missed
//              M - requested bytes), or the end if a requested offset lies beyond it.
//   kGap       (json) {"stdout_offset": N, "stderr_offset": M}  a follower fell so far behind
//              that the ring dropped bytes it had not been sent; output continues at these
//              offsets.
//   kEnd       ()     a non-follow attach sent all its ring holds; the process still runs.
//
// Process (json) = {"pid": 12, "tag": "dev" | null, "cmd": ["sh", "-c", ".."],
//   "state": "running" | "exited", "exit_code": 0 | null, "signal": null | 9,
//   "started_at": "2026-11-29T21:00:00.123Z", "exited_at": ".." | null,
//   "pty": {"cols": 80, "rows": 24} | null,
//   "stdout_offset": N, "stderr_offset": M,     (bytes each stream produced so far)
//   "stdout_start": A, "stderr_start": B}       (oldest offsets the ring still holds)
// Details of background processes:
//   - A process shows "exited" (with exit_code, exited_at, and kExit on attach) once it was
//     reaped and its output read to EOF or the 100 ms grace; until then it shows "running".
//   - A non-follow attach sends the output that existed when it attached, then kEnd (kExit
//     if the process has finished by then).
//   - With "output": false the connection only drives the process and stays open until the
//     daemon closes it; with "follow" it still gets kExit when the process ends.
//   - kPong on an attach means every earlier frame was applied: kStdin data sits in the
//     process's stdin buffer and reaches it in order. Frames sent just before the daemon
//     hangs up are still applied.
//   - kStdinClose on a pty writes the terminal's EOF character (^D); later kStdin still goes in.
//   - If a new process gets the pid of a listed exited one, the old entry is dropped. Tags
//     are not checked for uniqueness here (the daemon does that).
// Output offsets count the bytes of one stream since the process started. Each background
// process keeps its output in a ring of kProcessRingBytes (both streams together); older
// output is dropped as new output arrives. All the rings together hold at most
// kOutputBudgetBytes: beyond it init drops the oldest output of the process that finished
// first, then of the running process that holds the most (never what a "hold" follower was
// not sent), since init's memory must fit the reserve it keeps from its sandbox's commands
// (runtime/cgroup.h). init keeps at most kMaxExitedProcesses exited processes in its
// table (the oldest are forgotten first).
//
// File operations
// A kExec with "file_op" runs the operation in a worker process that init forks (no exec):
// the worker closes every inherited descriptor but its stdio, takes the request's user and
// runs inside the sandbox like any command, so a path reaches exactly what the sandbox's own
// programs reach and never a host file. Its stdio are the connection's streams as for any
// command (kStdin -> stdin; stdout -> kStdout; stderr -> kStderr; then kExit). The worker
// exits 0 on success; on failure it writes one JSON line to stderr,
//     {"code": "not_found" | "exists" | "not_a_directory" | "is_a_directory" | "not_empty" |
//              "permission_denied" | "read_only" | "disk_full" | "invalid_argument" |
//              "too_large" | "internal", "message": ".."}
// and exits 1. Paths must be absolute. An Entry (json) is
//     {"path": "/workspace/a.txt", "name": "a.txt", "type": "file" | "dir" | "symlink" | "other",
//      "size": 3, "mode": 420 (permission bits, & 07777), "uid": 0, "gid": 0,
//      "mtime": "2026-11-29T21:00:00.123Z", "target": "/x" (symlinks only, else absent)}
// where "size" of a directory is the space it takes (st_blocks * 512, at least st_blksize),
// the same on every filesystem. The ops that answer Entries (stat, list, mkdir, move, write)
// take options for what else they say:
//     "resolve_links": true   a symlink's Entry also has "resolved" (the absolute path it leads
//                             to, every link followed), "target_type" and "target_mode" (of what
//                             it leads to); each absent where the link leads nowhere
//     "xattr_prefix": "user.e2b."  the Entry also has "xattrs": {name without the prefix:
//                             value} of its extended attributes (through a symlink) under that
//                             prefix, when it has any (UTF-8 ones only)
// Ops ("file_op" = {"op": .., fields}):
//   read    {"path"}  stdout: one line {"size": N}, then the file's bytes (a regular file
//           only). If it shrinks while read the worker fails after what it sent. A file whose
//           size says nothing (on procfs, sysfs, cgroupfs) gets {} instead, and is read to
//           its end.
// write and mkdir also take "owner": {"uid": N, "gid": N}: the file written and each directory
// they create are given to it (the E2B front runs them as root so, as envd does).
//   write   {"path", "mode"?: 420, "parents": true, "append": false}  stdin: the content.
//           Written to a temporary file beside the target and renamed over it, so a failed
//           write (disk full, cut off) leaves the old content intact. Without "mode" an
//           existing file keeps its mode, a new one gets 0644. "xattrs": {key: value} are set
//           on the new file under "xattr_prefix" (an overwrite keeps none of the old file's
//           extended attributes; a filesystem without them stores none). stdout: one Entry line.
//   stat    {"path"}  stdout: one Entry line (a symlink is reported, not followed)
//   list    {"path", "depth": 1}  stdout: one line {"entries": [Entry..], "truncated": bool}
//           (at most kMaxListEntries entries; symlinks are not followed)
//   mkdir   {"path", "parents": true, "mode"?: 493}  stdout: one Entry line. An existing
//           directory is fine with "parents", else "exists".
//   move    {"from", "to"}  rename(2); stdout: one Entry line for "to".
//   remove  {"path", "recursive": false}  a non-empty directory without "recursive" is
//           "not_empty". Never follows symlinks.
//   archive_create {"path", "one_file_system": false}  stdout: a POSIX pax tar of the directory
//           (entries named relative to it; symlinks stored as symlinks, never followed) or of
//           the single file. "one_file_system": what is mounted below the directory (a
//           filesystem, a bound directory or file) is left out.
//   archive_extract {"path"}  stdin: a tar (plain, gzip, bzip2 or xz). Unpacked under the
//           directory "path" (created with parents). Entries with absolute names or ".."
//           components, hard links leaving the directory, device nodes, and any entry whose
//           path would pass through a symlink are refused with "invalid_argument" (entries
//           before it stay unpacked). With "owner", every entry unpacked is given to it.
//           stdout: one line {"entries": N, "bytes": M}.
//   watch   {"path", "recursive": true, "entries": false, "allow_network_mounts": true}
//           ("entries": create, write and chmod lines carry the "entry" of their path, with the
//           Entry options; without "allow_network_mounts" a path on NFS, CIFS, SMB or FUSE is
//           "invalid_argument") stdout: one line {"type": "ready"} once the inotify
//           watches are set, then one line per event
//           {"type": "create" | "write" | "remove" | "rename" | "chmod", "path": "/abs", "dir": bool}
//           until the connection closes. New subdirectories are watched as they appear.
//   connect {"port"}  (not a file: the port proxy's way into a sandbox with a kernel of its
//           own) connects to 127.0.0.1:port, else [::1]:port, inside the sandbox; "not_found"
//           when refused. Connected, stdout: "+" (kConnectReady), then what the application
//           sends; stdin goes to the application (its end half-closes the connection). Ends,
//           with success, when the application closes or resets the connection.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bulkhead::ctl {

enum FrameType : uint8_t {
  kExec = 1,
  kStdin = 2,
  kStdinClose = 3,
  kSignal = 4,
  kPing = 5,
  kProcList = 6,
  kProcAttach = 7,
  kResize = 8,
  kSudoUsers = 9,
  kLimits = 10,
  kReclaim = 11,
  kFreeze = 12,
  kStarted = 16,
  kStdout = 17,
  kStderr = 18,
  kExit = 19,
  kError = 20,
  kPong = 21,
  kResult = 22,
  kAttached = 23,
  kGap = 24,
  kEnd = 25,
};

// Frames larger than this are a protocol error; output is sent in chunks well below it.
constexpr uint32_t kMaxFrame = 1u << 20;
constexpr size_t kHeaderSize = 5;
// Output kept per background process (stdout and stderr together).
constexpr size_t kProcessRingBytes = 4u << 20;
constexpr size_t kOutputBudgetBytes = 8u << 20;
// Exited background processes init still reports (with their output).
constexpr size_t kMaxExitedProcesses = 256;
// Entries one "list" file operation returns at most.
constexpr size_t kMaxListEntries = 100000;
// Entries of one kSudoUsers list (and of a spec's "sudo_users").
constexpr size_t kMaxSudoUsers = 16;
// The fd on which init finds its listening control socket; or (gvisor) the control directory
// holding the daemon's listening socket kDaemonSocketName, which init dials, keeping
// kIdleConnections connections there that wait for a request each.
constexpr int kListenFd = 3;
inline constexpr char kDaemonSocketName[] = "daemon.sock";
constexpr size_t kIdleConnections = 2;
// The fd on which init finds the cgroup.procs file of the sandbox's workload group
// (runtime/cgroup.h): every process init starts writes "0" into it before it execs.
constexpr int kWorkloadCgroupFd = 4;
// The microvm tier's guest (init/guest_boot.h): init listens on vsock port kGuestInitPort, and
// once it serves, it connects to the host (CID 2) on kGuestReadyPort and closes: the tier's
// sign that the guest booted. A probe guest (`init --guest-probe`) prints kGuestProbeSign on
// its console and powers off.
constexpr uint32_t kGuestInitPort = 1024;
constexpr uint32_t kGuestReadyPort = 1025;
inline constexpr char kGuestProbeSign[] = "bulkhead-guest-ok";
// A template guest (`init --guest-template`, runtime/microvm/template.h) writes
// kGuestTemplateSign and a newline on its virtio serial port named kGuestTemplatePort once it
// waits there for its boot message (EncodeGuestBootArg's hex and a newline), which a copy
// restored for a sandbox reads.
inline constexpr char kGuestTemplateSign[] = "bulkhead-template-waits";
inline constexpr char kGuestTemplatePort[] = "bulkhead.boot";
// The connect worker's first byte on stdout: it is connected (file op "connect").
constexpr char kConnectReady = '+';

inline void EncodeHeader(uint8_t* out, uint8_t type, uint32_t payload_len) {
  uint32_t len = payload_len + 1;
  out[0] = len & 0xff;
  out[1] = (len >> 8) & 0xff;
  out[2] = (len >> 16) & 0xff;
  out[3] = (len >> 24) & 0xff;
  out[4] = type;
}

// Returns the payload length from a 5-byte header, or -1 if the length is invalid.
inline int64_t DecodePayloadLength(const uint8_t* in) {
  uint32_t len = uint32_t(in[0]) | (uint32_t(in[1]) << 8) | (uint32_t(in[2]) << 16) |
                 (uint32_t(in[3]) << 24);
  if (len < 1 || len > kMaxFrame) return -1;
  return int64_t(len) - 1;
}

}  // namespace bulkhead::ctl
