// The payloads of init's control protocol (ctl_protocol.h) as types, with the one encoder and
// the one decoder of each, shared by the daemon and init. Decoders take untrusted text (init
// decodes what the daemon sends; the daemon decodes what init, which sandbox code may have
// taken over, sends): anything but the documented shape is an Error, never an exception.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::ctl {

struct PtySize {
  uint16_t cols = 80;
  uint16_t rows = 24;
};

// daemon -> init

// kExec: a command, a background process or a file operation.
struct ExecMessage {
  std::vector<std::string> argv;  // never empty, except for a file operation
  std::vector<std::string> env;   // "K=V" entries
  std::string cwd = "/";
  std::optional<std::string> user;  // absent: init's own uid
  uint64_t timeout_ms = 0;          // 0: no timeout
  bool stdin_enabled = false;       // false: the command's stdin is /dev/null
  bool background = false;
  bool attach = false;              // background: the connection then follows it, holding
  std::optional<std::string> tag;   // background processes only
  std::optional<PtySize> pty;
  std::optional<uint64_t> output_limit;  // foreground: bytes forwarded of each stream (+1)
  std::optional<uint64_t> nofile;        // the command's RLIMIT_NOFILE
  std::optional<nlohmann::json> file_op;  // the "file_op" object; set instead of argv
};

// kProcAttach
struct AttachMessage {
  int pid = 0;
  bool output = true;
  bool follow = false;
  bool hold = false;
  uint64_t stdout_offset = 0;
  uint64_t stderr_offset = 0;
};

// init -> daemon

// Where output (re)starts: kAttached's offsets, kGap.
struct StreamOffsets {
  uint64_t stdout_offset = 0;
  uint64_t stderr_offset = 0;
};

// A background process in init's table.
struct ProcessInfo {
  int pid = 0;
  std::optional<std::string> tag;
  std::vector<std::string> cmd;
  bool exited = false;  // "state": "exited" | "running"
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string started_at;
  std::optional<std::string> exited_at;
  std::optional<PtySize> pty;
  uint64_t stdout_offset = 0, stderr_offset = 0;  // bytes each stream produced so far
  uint64_t stdout_start = 0, stderr_start = 0;    // oldest offsets the ring still holds
};

// kStarted
struct StartedMessage {
  int pid = 0;
  std::optional<ProcessInfo> process;  // a background process's entry
};

// kExit (decoded leniently: a malformed field is left out, the exit still reported)
struct ExitMessage {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  double duration_ms = 0;
};

// kAttached
struct AttachedMessage {
  ProcessInfo process;
  StreamOffsets start;
};

// kError: what failed, in the words both sides know (decoded leniently, as kExit).
enum class ErrorWord { kNotFound, kInvalidArgument, kInternal };
struct ErrorMessage {
  ErrorWord code = ErrorWord::kInternal;
  std::string message;
};

// kResult of kProcList
struct ProcessList {
  std::vector<ProcessInfo> processes;
};

// kSudoUsers: at most kMaxSudoUsers names or uids, each non-empty, short, without ':' or '/'.
struct SudoUsersMessage {
  std::vector<std::string> users;
};

// kLimits: the sandbox's limits that its own kernel enforces (Capabilities::limits_in_sandbox).
struct LimitsMessage {
  int pids = 0;              // > 0
  int64_t memory_bytes = 0;  // > 0
  double cpus = 1;           // 0.01 .. 4096
};

// How the microvm tier boots a guest's init (`init --guest ARG`, ARG the hex of this JSON after
// the kernel command line's "--": the command line splits on spaces and strips quotes): the
// sandbox's limits, the vsock port init listens on, each volume's virtio-fs share, and whether
// the guest has a NIC (common/guest_link.h: its addresses are fixed).
struct GuestVolume {
  std::string tag;     // the share's tag: 1-36 of [a-z0-9-]
  std::string target;  // an absolute path in the sandbox, without "." or ".." components
  bool read_only = false;
};
struct GuestBootMessage {
  LimitsMessage limits;
  uint32_t vsock_port = 0;  // 1 .. 0xfffffffe
  std::vector<GuestVolume> volumes;
  bool network = false;
  // Sent only to a guest restored from a template (runtime/microvm/template.h), whose clock and
  // random state are the template's: the host's wall clock and 32 fresh random bytes (hex).
  int64_t realtime_ns = 0;
  std::string entropy;
};
inline constexpr size_t kMaxGuestVolumes = 64;

// kResult of kReclaim: the process init killed, if any.
// kFreeze, and its kResult.
struct FreezeMessage {
  bool frozen = false;
  // With a thaw, where the sandbox has a kernel of its own: the host's wall clock (ns since the
  // epoch) and 32 random bytes (hex) for it, whose clock and random state may be an image's.
  int64_t realtime_ns = 0;
  std::string entropy;
};
struct FrozenMessage {
  bool settled = false;
};

struct ReclaimedMessage {
  std::optional<int> killed;
  int64_t resident_bytes = 0;
};

// kSignal: a signal number in 1..64.
struct SignalMessage {
  int signal = 0;
};

std::string Encode(const ExecMessage& m);
std::string Encode(const AttachMessage& m);
std::string Encode(const PtySize& m);  // kResize
std::string Encode(const SudoUsersMessage& m);
std::string Encode(const SignalMessage& m);
std::string Encode(const LimitsMessage& m);
std::string Encode(const ReclaimedMessage& m);
std::string Encode(const FreezeMessage& m);
std::string Encode(const FrozenMessage& m);
std::string Encode(const StreamOffsets& m);  // kGap
std::string Encode(const StartedMessage& m);
std::string Encode(const ExitMessage& m);
std::string Encode(const AttachedMessage& m);
std::string Encode(const ErrorMessage& m);
std::string Encode(const ProcessList& m);

Result<ExecMessage> DecodeExec(std::string_view text);
Result<AttachMessage> DecodeAttach(std::string_view text);
Result<PtySize> DecodePtySize(std::string_view text);
Result<SudoUsersMessage> DecodeSudoUsers(std::string_view text);
Result<SignalMessage> DecodeSignal(std::string_view text);
Result<LimitsMessage> DecodeLimits(std::string_view text);
std::string EncodeGuestBootArg(const GuestBootMessage& m);  // hex
Result<GuestBootMessage> DecodeGuestBootArg(std::string_view hex);
Result<ReclaimedMessage> DecodeReclaimed(std::string_view text);
Result<FreezeMessage> DecodeFreeze(std::string_view text);
Result<FrozenMessage> DecodeFrozen(std::string_view text);
Result<StreamOffsets> DecodeStreamOffsets(std::string_view text);
Result<StartedMessage> DecodeStarted(std::string_view text);
Result<ExitMessage> DecodeExit(std::string_view text);
// A kExit as far as it says anything (not even an object: an exit with nothing known).
ExitMessage ReadExit(std::string_view text);
Result<AttachedMessage> DecodeAttached(std::string_view text);
Result<ErrorMessage> DecodeError(std::string_view text);
Result<ProcessList> DecodeProcessList(std::string_view text);

// A Process as ctl_protocol.h (and the API, which shows init's Process as it is) spells it.
nlohmann::json ToJson(const ProcessInfo& p);

// The ErrorWord of an ErrorCode, and back.
ErrorWord WordOf(ErrorCode code);
ErrorCode CodeOf(ErrorWord word);

}  // namespace bulkhead::ctl
