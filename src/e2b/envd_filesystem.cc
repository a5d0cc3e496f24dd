// envd's filesystem service (e2b-protocol.md §5.2): Stat, ListDir, MakeDir, Move, Remove as
// unary Connect calls, WatchDir as a server stream, and the polled watchers of
// CreateWatcher / GetWatcherEvents / RemoveWatcher. Each call runs file operations inside the
// sandbox as the request's user (envd_fs.h).
#include <algorithm>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)
#include <chrono>
#include <memory>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "common/bounded_json.h"
#include "common/ctl_protocol.h"
#include "e2b/connect_rpc.h"
#include "e2b/envd.h"
#include "e2b/envd_fs.h"
#include "e2b/envd_paths.h"
#include "e2b/watchers.h"
#include "http/client_hangup_watch.h"
#include "service/file_request.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// A watch event line names one path; more than this without a newline is a broken worker.
constexpr size_t kMaxEventLineBytes = 64 * 1024;

RpcError Invalid(std::string message) { return {"invalid_argument", std::move(message)}; }

// A field of a request message, by its JSON name or its proto name (proto3 JSON parsers
// accept both); nullptr when absent or null.
const json* Field(const json& message, std::string_view json_name, std::string_view proto_name) {
  for (std::string_view name : {json_name, proto_name}) {
    const auto found = message.find(std::string(name));
    if (found != message.end() && !found->is_null()) return &*found;
  }
  return nullptr;
}

Result<std::string> StringField(const json& message, std::string_view json_name, std::string_view proto_name) {
  const json* field = Field(message, json_name, proto_name);
  if (!field) return std::string();
  if (!field->is_string()) {
    return MakeError(ErrorCode::kBadRequest, fmt::format("{} must be a string, not {}", json_name, field->type_name()));
  }
  return field->get<std::string>();
}

Result<bool> BoolField(const json& message, std::string_view json_name, std::string_view proto_name) {
  const json* field = Field(message, json_name, proto_name);
  if (!field) return false;
  if (!field->is_boolean()) {
    return MakeError(ErrorCode::kBadRequest, fmt::format("{} must be a boolean, not {}", json_name, field->type_name()));
  }
  return field->get<bool>();
}

Result<WatchOptions> WatchOptionsOf(const json& message) {
  WatchOptions options;
  Result<bool> recursive = BoolField(message, "recursive", "recursive");
  if (!recursive.ok()) return recursive.error();
  Result<bool> include_entry = BoolField(message, "includeEntry", "include_entry");
  if (!include_entry.ok()) return include_entry.error();
  Result<bool> network_mounts = BoolField(message, "allowNetworkMounts", "allow_network_mounts");
  if (!network_mounts.ok()) return network_mounts.error();
  options.recursive = *recursive;
  options.include_entry = *include_entry;
  options.allow_network_mounts = *network_mounts;
  return options;
}

// A uint32: a JSON number or a decimal string, as proto3 JSON allows.
Result<uint32_t> Uint32Field(const json& message, std::string_view json_name, std::string_view proto_name) {
  const json* field = Field(message, json_name, proto_name);
  if (!field) return uint32_t{0};
  const Error bad = MakeError(ErrorCode::kBadRequest, fmt::format("{} must be an unsigned 32-bit integer", json_name));
  if (field->is_number_unsigned()) {
    const uint64_t value = field->get<uint64_t>();
    if (value > UINT32_MAX) return bad;
    return static_cast<uint32_t>(value);
  }
  if (field->is_string()) {
    const std::string& text = field->get_ref<const std::string&>();
    if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos) return bad;
    const uint64_t value = std::stoull(text);
    if (value > UINT32_MAX) return bad;
    return static_cast<uint32_t>(value);
  }
  return bad;
}

RpcError RpcErrorOf(const Error& error) { return FileRpcError(error); }

// A WatchDir's Connect-Timeout-Ms: once it passes, the watch operation is stopped.
struct Deadline {
  explicit Deadline(asio::any_io_executor e) : timer(e) {}
  asio::steady_timer timer;
  bool reached = false;
  core::FileOperation* operation = nullptr;  // null once the watch ended
};

asio::awaitable<void> AwaitDeadline(std::shared_ptr<Deadline> deadline) {
  boost::system::error_code ec;
  co_await deadline->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (ec || !deadline->operation) co_return;
  deadline->reached = true;
  deadline->operation->Cancel();
}

class FilesystemCall {
 public:
  explicit FilesystemCall(EnvdRequest& request) : request_(request), exchange_(request.exchange) {}

  asio::awaitable<void> Serve(std::string_view method) {
    if (method == "WatchDir") co_return co_await WatchDir();
    static constexpr std::string_view kUnary[] = {"Stat",          "ListDir",          "MakeDir",      "Move", "Remove",
                                                  "CreateWatcher", "GetWatcherEvents", "RemoveWatcher"};
    if (std::find(std::begin(kUnary), std::end(kUnary), method) == std::end(kUnary)) {
      const RpcError unknown{"unimplemented",
                             fmt::format("filesystem.Filesystem/{} is not a method of envd's filesystem service", method)};
      co_return co_await SendUnaryError(exchange_, unknown);
    }
    std::optional<json> message = co_await ReadUnaryRequest(exchange_);
    if (!message) co_return;
    Result<json> answer = MakeError(ErrorCode::kInternal, "unanswered");
    if (method == "Stat") answer = co_await Stat(*message);
    if (method == "ListDir") answer = co_await ListDir(*message);
    if (method == "MakeDir") answer = co_await MakeDir(*message);
    if (method == "Move") answer = co_await Move(*message);
    if (method == "Remove") answer = co_await Remove(*message);
    if (method == "CreateWatcher") answer = co_await CreateWatcher(*message);
    if (method == "GetWatcherEvents") answer = GetWatcherEvents(*message);
    if (method == "RemoveWatcher") answer = RemoveWatcher(*message);
    if (!answer.ok()) co_return co_await SendUnaryError(exchange_, RpcErrorOf(answer.error()));
    co_await SendUnaryResponse(exchange_, *answer);
  }

 private:
  asio::awaitable<Result<SandboxFiles>> Files() {
    co_return co_await SandboxFiles::Open(request_.context.manager, request_.sandbox_id, request_.user);
  }

  // The message's `field` resolved for `files`' user.
  static Result<std::string> PathOf(const SandboxFiles& files, const json& message, std::string_view json_name,
                                    std::string_view proto_name) {
    Result<std::string> path = StringField(message, json_name, proto_name);
    if (!path.ok()) return path.error();
    return files.Resolve(*path);
  }

  asio::awaitable<Result<json>> EntryAnswer(SandboxFiles& files, Result<json> entry) {
    if (!entry.ok()) co_return entry.error();
    Result<json> info = co_await files.Info(*entry);
    if (!info.ok()) co_return info.error();
    co_return json{{"entry", std::move(*info)}};
  }

  asio::awaitable<Result<json>> Stat(const json& message) {
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return files.error();
    Result<std::string> path = PathOf(*files, message, "path", "path");
    if (!path.ok()) co_return path.error();
    Result<json> entry = co_await files->Stat(*path);
    co_return co_await EntryAnswer(*files, std::move(entry));
  }

  asio::awaitable<Result<json>> ListDir(const json& message) {
    Result<uint32_t> depth = Uint32Field(message, "depth", "depth");
    if (!depth.ok()) co_return depth.error();
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return files.error();
    Result<std::string> path = PathOf(*files, message, "path", "path");
    if (!path.ok()) co_return path.error();
    // envd: 0 is 1; the worker lists at most kMaxListDepth levels (deeper asks get that many).
    const int64_t levels = std::clamp<int64_t>(*depth == 0 ? 1 : *depth, 1, api::kMaxListDepth);
    const json op = {{"op", "list"}, {"path", *path}, {"depth", levels}};
    Result<json> listing = co_await files->Run(op, kMaxListingAnswerBytes);
    if (!listing.ok()) co_return listing.error();
    if (!listing->is_object() || !listing->contains("entries") || !(*listing)["entries"].is_array()) {
      co_return MakeError(ErrorCode::kInternal, "the sandbox's file worker answered a listing without entries");
    }
    if (listing->value("truncated", false)) {
      co_return MakeError(ErrorCode::kConflict,
                          fmt::format("{} holds more than {} entries down to depth {}: list it with a smaller depth",
                                      *path, ctl::kMaxListEntries, levels),
                          "too_many_entries");
    }
    std::vector<json> entries;
    for (const json& entry : (*listing)["entries"]) {
      Result<json> info = co_await files->Info(entry);
      if (!info.ok()) co_return info.error();
      entries.push_back(std::move(*info));
    }
    SortEntryInfos(entries);
    co_return json{{"entries", std::move(entries)}};
  }

  asio::awaitable<Result<json>> MakeDir(const json& message) {
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return files.error();
    Result<std::string> path = PathOf(*files, message, "path", "path");
    if (!path.ok()) co_return path.error();
    Result<json> existing = co_await files->Stat(*path);
    // envd looks with os.Stat, through a symlink.
    if (existing.ok() && FollowedType(*existing) == "dir") {
      co_return MakeError(ErrorCode::kConflict, fmt::format("directory already exists: {}", *path), "exists");
    }
    if (existing.ok()) {
      co_return MakeError(ErrorCode::kBadRequest,
                          fmt::format("path already exists but it is not a directory: {}", *path), "invalid_argument");
    }
    if (existing.error().detail_code != "not_found") co_return existing.error();
    const json op = {{"op", "mkdir"}, {"path", *path}, {"parents", true}};
    Result<json> made = co_await files->Run(op);
    if (!made.ok() && (made.error().detail_code == "exists" || made.error().detail_code == "not_a_directory")) {
      co_return MakeError(ErrorCode::kBadRequest,
                          fmt::format("a component of {} exists but is not a directory", *path), "invalid_argument");
    }
    co_return co_await EntryAnswer(*files, std::move(made));
  }

  asio::awaitable<Result<json>> Move(const json& message) {
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return files.error();
    Result<std::string> source = PathOf(*files, message, "source", "source");
    if (!source.ok()) co_return source.error();
    Result<std::string> destination = PathOf(*files, message, "destination", "destination");
    if (!destination.ok()) co_return destination.error();
    // envd makes the destination's directory first.
    const std::string parent = DirName(*destination);
    if (parent != "/") {
      const json mkdir = {{"op", "mkdir"}, {"path", parent}, {"parents", true}};
      Result<json> made = co_await files->Run(mkdir);
      if (!made.ok()) {
        const std::string& code = made.error().detail_code;
        if (code == "exists" || code == "not_a_directory") {
          co_return MakeError(ErrorCode::kBadRequest, fmt::format("{} is not a directory", parent), "invalid_argument");
        }
        co_return made.error();
      }
    }
    const json op = {{"op", "move"}, {"from", *source}, {"to", *destination}};
    Result<json> moved = co_await files->Run(op);
    if (!moved.ok() && moved.error().detail_code == "not_found") {
      co_return MakeError(ErrorCode::kNotFound, fmt::format("source file not found: {}", *source), "not_found");
    }
    co_return co_await EntryAnswer(*files, std::move(moved));
  }

  asio::awaitable<Result<json>> Remove(const json& message) {
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return files.error();
    Result<std::string> path = PathOf(*files, message, "path", "path");
    if (!path.ok()) co_return path.error();
    // envd removes with os.RemoveAll: directories with their contents, and a path that is not
    // there (nor its parent) counts as removed. A symlink is removed, never followed.
    const json op = {{"op", "remove"}, {"path", *path}, {"recursive", true}};
    Result<json> removed = co_await files->Run(op);
    if (!removed.ok() && removed.error().detail_code != "not_found") co_return removed.error();
    co_return json::object();
  }

  asio::awaitable<Result<json>> CreateWatcher(const json& message) {
    Result<WatchOptions> options = WatchOptionsOf(message);
    if (!options.ok()) co_return options.error();
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return files.error();
    Result<std::string> path = PathOf(*files, message, "path", "path");
    if (!path.ok()) co_return path.error();
    std::optional<Accounts> accounts;
    if (options->include_entry) {
      Result<const Accounts*> known = co_await files->EntryAccounts();
      if (!known.ok()) co_return known.error();
      accounts = **known;
    }
    Result<StartedWatch> watch = co_await StartWatch(*files, *path, *options);
    if (!watch.ok()) co_return watch.error();
    auto executor = co_await asio::this_coro::executor;
    Result<std::string> id =
        request_.context.watchers->Add(request_.context.manager, executor, request_.sandbox_id, *path,
                                       std::move(watch->operation), std::move(watch->pending), std::move(accounts));
    if (!id.ok()) co_return id.error();
    co_return json{{"watcherId", *id}};
  }

  Result<json> GetWatcherEvents(const json& message) {
    Result<std::string> id = StringField(message, "watcherId", "watcher_id");
    if (!id.ok()) return id.error();
    Result<std::vector<json>> events = request_.context.watchers->Poll(request_.sandbox_id, *id);
    if (!events.ok()) return events.error();
    return json{{"events", std::move(*events)}};
  }

  Result<json> RemoveWatcher(const json& message) {
    Result<std::string> id = StringField(message, "watcherId", "watcher_id");
    if (!id.ok()) return id.error();
    if (Status removed = request_.context.watchers->Remove(request_.sandbox_id, *id); !removed.ok()) {
      return removed.error();
    }
    return json::object();
  }

  // WatchDir: {"start":{}}, then an event per change (and keepalives while quiet), until the
  // client leaves, the deadline (Connect-Timeout-Ms: deadline_exceeded) or the watched
  // directory goes away (the stream then ends without error).
  asio::awaitable<void> WatchDir() {
    ServerStream stream(exchange_);
    std::optional<json> message = co_await stream.ReadRequest();
    if (!message) co_return;
    Result<std::optional<std::chrono::milliseconds>> timeout = ConnectTimeout(exchange_.request());
    if (!timeout.ok()) co_return co_await stream.Finish(Invalid(timeout.error().message));
    Result<WatchOptions> options = WatchOptionsOf(*message);
    if (!options.ok()) co_return co_await stream.Finish(RpcErrorOf(options.error()));
    Result<SandboxFiles> files = co_await Files();
    if (!files.ok()) co_return co_await stream.Finish(RpcErrorOf(files.error()));
    Result<std::string> path = PathOf(*files, *message, "path", "path");
    if (!path.ok()) co_return co_await stream.Finish(RpcErrorOf(path.error()));
    const Accounts* accounts = nullptr;
    if (options->include_entry) {
      Result<const Accounts*> known = co_await files->EntryAccounts();
      if (!known.ok()) co_return co_await stream.Finish(RpcErrorOf(known.error()));
      accounts = *known;
    }
    Result<StartedWatch> watch = co_await StartWatch(*files, *path, *options);
    if (!watch.ok()) co_return co_await stream.Finish(RpcErrorOf(watch.error()));
    core::FileOperation& operation = *watch->operation;

    // The deadline and a client that leaves both stop the watch operation; the loop below
    // then tells which it was.
    auto executor = co_await asio::this_coro::executor;
    auto deadline = std::make_shared<Deadline>(executor);
    deadline->operation = &operation;
    if (*timeout && (*timeout)->count() > 0) {
      deadline->timer.expires_after(**timeout);
      asio::co_spawn(executor, AwaitDeadline(deadline), asio::detached);
    }
    api::ClientHangupWatch hangup(exchange_.stream().socket(), [&operation] { operation.Cancel(); });

    std::optional<RpcError> end;
    bool sandbox_gone = false;
    const json start = {{"start", json::object()}};
    const bool started = co_await stream.Send(start);
    if (!started) {
      end = RpcError{"canceled", "the client left"};
    } else if (std::optional<std::chrono::seconds> interval = KeepaliveInterval(exchange_.request())) {
      stream.StartKeepalive(*interval, json{{"keepalive", json::object()}});
    }
    std::string pending;
    std::string piece = std::move(watch->pending);
    while (!end) {
      for (const std::string& text : TakeLines(pending, piece)) {
        const json line = ParseBoundedJson(text);
        std::optional<json> event = FilesystemEventOf(line, *path, accounts);
        if (!event) continue;
        const json envelope = {{"filesystem", std::move(*event)}};
        const bool sent = co_await stream.Send(envelope);
        if (!sent) {
          end = RpcError{"canceled", "the client left"};
          break;
        }
      }
      if (end) break;
      if (pending.size() > kMaxEventLineBytes) {
        end = RpcError{"internal", "the sandbox's file worker sent an overlong watch event"};
        break;
      }
      Result<std::string> next = co_await operation.Read();
      if (!next.ok()) {
        if (deadline->reached) {
          end = DeadlineExceeded();
        } else if (hangup.client_gone()) {
          end = RpcError{"canceled", "the client left"};
        } else if (next.error().detail_code == "sandbox_unreachable") {
          sandbox_gone = true;  // cut below, as for a process stream (envd_process.cc)
        } else {
          end = RpcErrorOf(next.error());
        }
        break;
      }
      if (next->empty()) break;  // the watched directory itself went away
      piece = std::move(*next);
    }
    deadline->operation = nullptr;
    deadline->timer.cancel();
    if (sandbox_gone) co_return co_await stream.Cut();
    // Finished even for a client that left: Finish first waits for a keepalive still being
    // written, which must not outlive this call (and its exchange).
    co_await stream.Finish(end);
    if (hangup.client_gone()) exchange_.set_keep_alive(false);
  }

  EnvdRequest& request_;
  api::HttpExchange& exchange_;
};

}  // namespace

boost::asio::awaitable<void> ServeFilesystemService(EnvdRequest& request, std::string_view method) {
  FilesystemCall call(request);
  co_await call.Serve(method);
}

}  // namespace bulkhead::e2b
