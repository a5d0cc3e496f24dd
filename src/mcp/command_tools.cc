// Tools that run programs in a sandbox: one command to completion, or a background
// process whose output is read by offset.
#include <algorithm>
#include <chrono>
#include <thread>

#include "client/api_client.h"
#include "client/line_splitter.h"
#include "common/base64.h"
#include "common/bounded_json.h"
#include "mcp/text.h"
#include "mcp/tool.h"

namespace bulkhead::mcp {
namespace {

using cli::HttpMethod;
using cli::SandboxPath;

constexpr int64_t kDefaultOutputChars = 20000;

// The bytes of an output event: "data" when UTF-8, else "data_b64".
std::string EventBytes(const json& event) {
  if (auto data = event.find("data"); data != event.end() && data->is_string()) return data->get<std::string>();
  if (auto data = event.find("data_b64"); data != event.end() && data->is_string()) {
    return Base64Decode(data->get<std::string>()).value_or(std::string());
  }
  return {};
}

Error MalformedStream(const std::string& why) {
  return MakeError(ErrorCode::kInternal, "unexpected answer from the daemon: " + why, "bad_response");
}

// cmd, cwd, env as the exec and process routes take them.
std::optional<std::string> CommandRequest(const json& arguments, json& request) {
  json cmd;
  if (auto problem = CommandFromArguments(arguments, cmd)) return problem;
  request["cmd"] = cmd;
  if (arguments.contains("cwd")) request["cwd"] = arguments["cwd"];
  if (arguments.contains("env")) request["env"] = arguments["env"];
  return std::nullopt;
}

const char* kCommandProperties = R"json({
  "sandbox_id": {"type": "string", "minLength": 1},
  "command": {"type": "string", "description": "A shell command line, run by /bin/sh -c (pipes, &&, redirects work). Give this or argv."},
  "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1,
           "description": "The program and its arguments, run without a shell (no quoting needed). Give this or command."},
  "cwd": {"type": "string", "description": "Absolute working directory (default: the sandbox's workdir, /workspace)."},
  "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."}
})json";

json CommandSchema(const char* extra_properties, const json& required) {
  json schema = {{"type", "object"}, {"additionalProperties", false}, {"required", required}};
  schema["properties"] = ParseSchema(kCommandProperties);
  schema["properties"].update(ParseSchema(extra_properties));
  return schema;
}

std::string Plural(size_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

ToolResult RunCommand(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  json request = json::object();
  if (auto problem = CommandRequest(arguments, request)) return ToolError(*problem);
  const int64_t timeout_s = ArgumentOr<int64_t>(arguments, "timeout_s", 60);
  request["timeout_s"] = timeout_s;
  if (arguments.contains("stdin")) request["stdin"] = arguments["stdin"];
  const auto budget = static_cast<size_t>(ArgumentOr<int64_t>(arguments, "max_output_chars", kDefaultOutputChars));

  HeadTailBuffer out(budget), err(budget);
  json exit_event;
  auto on_line = [&](std::string_view line) -> Status {
    json event = ParseBoundedJson(line);
    if (event.is_discarded() || !event.is_object()) return MalformedStream("an exec event is not JSON");
    const std::string type = event.value("type", "");
    if (type == "stdout") out.Append(EventBytes(event));
    if (type == "stderr") err.Append(EventBytes(event));
    if (type == "exit") exit_event = event;
    if (type == "error") return cli::ErrorFromJson(event, ErrorCode::kInternal);
    return {};
  };
  auto response = context.api.http().SendForLines(HttpMethod::kPost, SandboxPath(id) + "/exec",
                                                  cli::DumpJson(request), on_line);
  if (context.cancelled()) return ToolError("cancelled");
  if (!response.ok()) return ApiFailure(response.error(), id);
  if (!response->ok()) return ApiFailure(cli::ErrorFromResponse(*response), id);
  if (response->content_type != "application/x-ndjson") {
    // A daemon that does not stream answers with the whole result.
    json result = ParseBoundedJson(response->body);
    if (!result.is_object()) return ApiFailure(MalformedStream("the exec result is not JSON"), id);
    out.Append(result.contains("stdout_b64") ? EventBytes({{"data_b64", result["stdout_b64"]}})
                                             : result.value("stdout", ""));
    err.Append(result.contains("stderr_b64") ? EventBytes({{"data_b64", result["stderr_b64"]}})
                                             : result.value("stderr", ""));
    exit_event = result;
  }
  if (exit_event.is_null()) {
    return ToolError("the command's output stream ended before it exited (the sandbox may have been deleted or "
                     "stopped); check it with list_sandboxes");
  }

  const bool timed_out = exit_event.value("timed_out", false);
  json structured = {
      {"exit_code", exit_event.value("exit_code", json(nullptr))},
      {"signal", exit_event.value("signal", json(nullptr))},
      {"timed_out", timed_out},
      {"duration_ms", exit_event.value("duration_ms", json(nullptr))},
      {"stdout", out.Render()},
      {"stderr", err.Render()},
      {"stdout_bytes", out.total_bytes()},
      {"stderr_bytes", err.total_bytes()},
      {"truncated", out.truncated() || err.truncated()},
  };
  std::string text;
  if (timed_out) {
    text = "timed out after " + std::to_string(timeout_s) + " s and was killed (raise timeout_s, or use start_process "
           "for long-running work)";
  } else if (structured["exit_code"].is_number_integer()) {
    text = "exit code " + structured["exit_code"].dump();
  } else {
    text = "killed by signal " + structured["signal"].dump();
  }
  text += "\n";
  for (const auto& [name, buffer] : {std::pair{"stdout", &out}, std::pair{"stderr", &err}}) {
    if (buffer->total_bytes() == 0) continue;
    text += std::string("--- ") + name + " (" + Plural(buffer->total_bytes(), "byte") +
            (buffer->truncated() ? ", only the start and the end shown" : "") + ") ---\n" +
            structured[name].get<std::string>();
    if (text.back() != '\n') text += "\n";
  }
  if (out.truncated() || err.truncated()) {
    text += "[output truncated to max_output_chars; redirect it to a file (cmd > out.txt 2>&1) and read_file or "
            "search_files it]\n";
  }
  return ToolResult{std::move(text), std::move(structured), false};
}

ToolResult StartProcess(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  json request = json::object();
  if (auto problem = CommandRequest(arguments, request)) return ToolError(*problem);
  if (arguments.contains("tag")) request["tag"] = arguments["tag"];
  if (arguments.contains("timeout_s")) request["timeout_s"] = arguments["timeout_s"];
  auto process = context.api.Call(HttpMethod::kPost, SandboxPath(id) + "/processes", request);
  if (!process.ok()) return ApiFailure(process.error(), id);
  if (!process->is_object() || !(*process)["pid"].is_number_integer()) {
    return ApiFailure(MalformedStream("the process has no pid"), id);
  }
  json structured = {{"pid", (*process)["pid"]},
                     {"tag", process->value("tag", json(nullptr))},
                     {"state", process->value("state", "running")}};
  std::string text = "started pid " + structured["pid"].dump() +
                     "; read its output with read_process_output (offsets start at 0), stop it with kill_process\n" +
                     cli::DumpJson(structured, 2);
  return ToolResult{std::move(text), std::move(structured), false};
}

// Where a read of one output stream stands.
struct StreamRead {
  int64_t next = 0;      // the offset after the last byte taken
  std::string bytes;     // taken so far
  size_t budget = 0;
  bool full = false;     // the budget is reached: later chunks are left for the next call
  int64_t dropped = 0;   // bytes the ring no longer held
};

// Takes an output chunk that ends at `end_offset` into `read`.
void TakeChunk(StreamRead& read, std::string bytes, int64_t end_offset) {
  if (read.full) return;
  int64_t start = end_offset - static_cast<int64_t>(bytes.size());
  if (start < read.next) {  // overlaps what was taken already
    const auto skip = static_cast<size_t>(read.next - start);
    if (skip >= bytes.size()) return;
    bytes.erase(0, skip);
    start = read.next;
  }
  if (start > read.next) {  // a hole without a gap event
    read.dropped += start - read.next;
    read.next = start;
  }
  size_t take = std::min(bytes.size(), read.budget - read.bytes.size());
  if (take < bytes.size()) {
    take = Utf8BoundaryAtOrBefore(bytes, take);
    read.full = true;
  }
  read.bytes.append(bytes, 0, take);
  read.next += static_cast<int64_t>(take);
}

// One non-following read of both streams from their offsets.
Status ReadOutputOnce(ToolContext& context, const std::string& process_path, StreamRead& out, StreamRead& err) {
  const std::string target = process_path + "/output?stdout_offset=" + std::to_string(out.next) +
                             "&stderr_offset=" + std::to_string(err.next) + "&follow=false";
  auto response = context.api.Download(target, "application/x-ndjson");
  if (!response.ok()) return response.error();
  auto on_line = [&](std::string_view line) -> Status {
    json event = ParseBoundedJson(line);
    if (event.is_discarded() || !event.is_object()) return MalformedStream("an output event is not JSON");
    const std::string type = event.value("type", "");
    if (type == "stdout" || type == "stderr") {
      TakeChunk(type == "stdout" ? out : err, EventBytes(event), event.value("offset", int64_t{0}));
    } else if (type == "gap") {
      StreamRead& read = event.value("stream", "") == "stderr" ? err : out;
      const int64_t from = event.value("from", int64_t{0}), to = event.value("to", int64_t{0});
      if (!read.full && to > read.next) {
        read.dropped += to - std::max(from, read.next);
        read.next = to;
      }
    } else if (type == "error") {
      return cli::ErrorFromJson(event, ErrorCode::kInternal);
    }
    return {};
  };
  cli::LineSplitter splitter;
  while (!(out.full && err.full)) {  // both budgets spent: leave the rest unread
    auto piece = response->Read();
    if (!piece.ok()) return piece.error();
    if (piece->empty()) return splitter.Finish(on_line);
    BH_TRY(splitter.Feed(*piece, on_line));
  }
  return {};
}

ToolResult ReadProcessOutput(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const int64_t pid = arguments["pid"].get<int64_t>();
  const std::string process_path = cli::ProcessPath(id, std::to_string(pid));
  const auto budget = static_cast<size_t>(ArgumentOr<int64_t>(arguments, "max_chars", kDefaultOutputChars));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(ArgumentOr<int64_t>(arguments, "wait_s", 0));

  StreamRead out, err;
  json process;
  for (;;) {
    out = StreamRead{.next = ArgumentOr<int64_t>(arguments, "stdout_offset", 0), .budget = budget};
    err = StreamRead{.next = ArgumentOr<int64_t>(arguments, "stderr_offset", 0), .budget = budget};
    if (Status read = ReadOutputOnce(context, process_path, out, err); !read.ok()) {
      return context.cancelled() ? ToolError("cancelled") : ApiFailure(read.error(), id);
    }
    auto info = context.api.Call(HttpMethod::kGet, process_path);
    if (!info.ok()) return context.cancelled() ? ToolError("cancelled") : ApiFailure(info.error(), id);
    process = std::move(*info);
    const bool news = !out.bytes.empty() || !err.bytes.empty() || out.dropped + err.dropped > 0;
    if (news || process.value("state", "") != "running" || std::chrono::steady_clock::now() >= deadline) break;
    // wait_s: poll until output or the exit arrives (the API's follow mode has no time limit).
    for (int i = 0; i < 4 && !context.cancelled() && std::chrono::steady_clock::now() < deadline; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (context.cancelled()) return ToolError("cancelled");
  }

  const bool running = process.value("state", "") == "running";
  const int64_t stdout_total = process.value("stdout_offset", out.next);
  const int64_t stderr_total = process.value("stderr_offset", err.next);
  const bool more = out.next < stdout_total || err.next < stderr_total;
  json structured = {
      {"pid", pid},
      {"running", running},
      {"exit_code", process.value("exit_code", json(nullptr))},
      {"signal", process.value("signal", json(nullptr))},
      {"stdout", ToValidUtf8(out.bytes)},
      {"stderr", ToValidUtf8(err.bytes)},
      {"stdout_next_offset", out.next},
      {"stderr_next_offset", err.next},
      {"more_output", more},
      {"dropped_bytes", out.dropped + err.dropped},
  };
  std::string text = "pid " + std::to_string(pid) + ": ";
  if (running) {
    text += "running";
  } else if (structured["exit_code"].is_number_integer()) {
    text += "exited with code " + structured["exit_code"].dump();
  } else {
    text += "killed by signal " + structured["signal"].dump();
  }
  text += "\n";
  for (const auto& [name, read] : {std::pair{"stdout", &out}, std::pair{"stderr", &err}}) {
    if (read->bytes.empty()) continue;
    text += std::string("--- ") + name + " ---\n" + structured[name].get<std::string>();
    if (text.back() != '\n') text += "\n";
  }
  if (out.bytes.empty() && err.bytes.empty()) text += "(no new output)\n";
  if (out.dropped + err.dropped > 0) {
    text += "[" + std::to_string(out.dropped + err.dropped) +
            " bytes were no longer kept by the output ring and are lost]\n";
  }
  text += "next offsets: stdout_offset=" + std::to_string(out.next) + " stderr_offset=" + std::to_string(err.next) +
          (more ? " (more output is waiting: call again with them)" : "") + "\n";
  return ToolResult{std::move(text), std::move(structured), false};
}

ToolResult SendProcessInput(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const int64_t pid = arguments["pid"].get<int64_t>();
  const std::string process_path = cli::ProcessPath(id, std::to_string(pid));
  const bool close = ArgumentOr<bool>(arguments, "close_stdin", false);
  if (!arguments.contains("data") && !close) return ToolError("give 'data' to send, or close_stdin: true, or both");
  size_t sent = 0;
  if (arguments.contains("data")) {
    const json request = {{"data", arguments["data"]}};
    auto written = context.api.Call(HttpMethod::kPost, process_path + "/stdin", request);
    if (!written.ok()) return ApiFailure(written.error(), id);
    sent = arguments["data"].get_ref<const std::string&>().size();
  }
  if (close) {
    auto closed = context.api.Call(HttpMethod::kPost, process_path + "/stdin/close");
    if (!closed.ok()) return ApiFailure(closed.error(), id);
  }
  return StructuredResult({{"pid", pid}, {"sent_bytes", sent}, {"stdin_closed", close}});
}

ToolResult KillProcess(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const int64_t pid = arguments["pid"].get<int64_t>();
  const std::string signal = ArgumentOr<std::string>(arguments, "signal", "SIGTERM");
  const json request = {{"signal", signal}};
  auto sent = context.api.Call(HttpMethod::kPost, cli::ProcessPath(id, std::to_string(pid)) + "/signal", request);
  if (!sent.ok()) return ApiFailure(sent.error(), id);
  return StructuredResult({{"pid", pid}, {"signal", signal}, {"sent", true}});
}

}  // namespace

void AddCommandTools(std::vector<ToolSpec>& tools) {
  tools.push_back(ToolSpec{
      .name = "run_command",
      .title = "Run command",
      .description =
          "Runs a command in a sandbox and waits for it to finish; returns its exit code, stdout and stderr. "
          "Use it for builds, tests, git, package installs, inspecting files. Give 'command' for a shell line "
          "(/bin/sh -c: pipes, &&, globs, redirects) or 'argv' to run a program directly without shell quoting. "
          "The command is killed after timeout_s (default 60, at most 3600): for servers, watchers and anything "
          "long-running use start_process instead. Each stream returned is capped at max_output_chars "
          "(default 20000): past that only its start and end are kept and truncated is true, so redirect big "
          "output to a file and read it with read_file or search_files. Non-UTF-8 bytes appear as U+FFFD. "
          "Exit code 127 means the program was not found. Each call is a fresh shell: cd and export do not "
          "carry over (use cwd and env).",
      .input_schema = CommandSchema(R"json({
        "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600, "description": "Kill the command after this many seconds (default 60)."},
        "stdin": {"type": "string", "description": "Text given to the command's stdin (default: none)."},
        "max_output_chars": {"type": "integer", "minimum": 1000, "maximum": 200000, "description": "Cap per stream (default 20000)."}
      })json", {"sandbox_id"}),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "exit_code": {"type": ["integer", "null"], "description": "null when killed by a signal."},
          "signal": {"type": ["string", "null"], "description": "The signal that ended it, e.g. SIGKILL."},
          "timed_out": {"type": "boolean"},
          "duration_ms": {"type": ["number", "null"]},
          "stdout": {"type": "string"},
          "stderr": {"type": "string"},
          "stdout_bytes": {"type": "integer", "description": "Bytes written, including any left out."},
          "stderr_bytes": {"type": "integer"},
          "truncated": {"type": "boolean"}
        },
        "required": ["exit_code", "signal", "timed_out", "stdout", "stderr", "truncated"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", true}, {"openWorldHint", true}},
      .handler = RunCommand,
  });
  tools.push_back(ToolSpec{
      .name = "start_process",
      .title = "Start background process",
      .description =
          "Starts a command in the background in a sandbox and returns its pid at once; it keeps running after "
          "this call. Use it for servers (python3 -m http.server 8000, npm run dev), watchers and long jobs. Its "
          "output is kept (the most recent part, in a bounded buffer): read it with read_process_output, write "
          "to its stdin with send_process_input, stop it with kill_process. Give 'command' (shell line) or "
          "'argv'. To reach a server it starts, see expose_port.",
      .input_schema = CommandSchema(R"json({
        "tag": {"type": "string", "minLength": 1, "maxLength": 128, "description": "Optional name for the process."},
        "timeout_s": {"type": "integer", "minimum": 0, "maximum": 2592000, "description": "Kill it after this many seconds; 0 or absent = no limit."}
      })json", {"sandbox_id"}),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {"pid": {"type": "integer"}, "tag": {"type": ["string", "null"]}, "state": {"type": "string"}},
        "required": ["pid"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", false}, {"openWorldHint", true}},
      .handler = StartProcess,
  });
  tools.push_back(ToolSpec{
      .name = "read_process_output",
      .title = "Read process output",
      .description =
          "Reads a background process's stdout and stderr from the given byte offsets (start at 0) and returns "
          "the new output, the offsets to pass next time, and whether the process still runs (else its exit "
          "code). At most max_chars per stream come back per call (default 20000); more_output says when more "
          "is waiting. wait_s (up to 60) waits for new output or the exit before answering, instead of "
          "polling quickly. Very old output of a chatty process may be gone (dropped_bytes).",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "pid": {"type": "integer", "minimum": 1, "description": "From start_process."},
          "stdout_offset": {"type": "integer", "minimum": 0, "description": "Default 0: all that is kept."},
          "stderr_offset": {"type": "integer", "minimum": 0, "description": "Default 0."},
          "wait_s": {"type": "integer", "minimum": 0, "maximum": 60, "description": "Wait up to this long for new output or the exit (default 0)."},
          "max_chars": {"type": "integer", "minimum": 100, "maximum": 200000, "description": "Cap per stream (default 20000)."}
        },
        "required": ["sandbox_id", "pid"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "pid": {"type": "integer"},
          "running": {"type": "boolean"},
          "exit_code": {"type": ["integer", "null"]},
          "signal": {"type": ["integer", "null"], "description": "Number of the signal that ended it."},
          "stdout": {"type": "string"},
          "stderr": {"type": "string"},
          "stdout_next_offset": {"type": "integer"},
          "stderr_next_offset": {"type": "integer"},
          "more_output": {"type": "boolean"},
          "dropped_bytes": {"type": "integer"}
        },
        "required": ["pid", "running", "stdout", "stderr", "stdout_next_offset", "stderr_next_offset", "more_output"]
      })json"),
      .annotations = {{"readOnlyHint", true}, {"openWorldHint", false}},
      .handler = ReadProcessOutput,
  });
  tools.push_back(ToolSpec{
      .name = "send_process_input",
      .title = "Send process input",
      .description =
          "Writes text to a background process's stdin (include \"\\n\" where the program expects Enter), "
          "and/or closes its stdin (close_stdin: true) so it sees end of input. Then read the reply with "
          "read_process_output.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "pid": {"type": "integer", "minimum": 1},
          "data": {"type": "string", "description": "Text to write."},
          "close_stdin": {"type": "boolean", "description": "Close stdin after writing (default false)."}
        },
        "required": ["sandbox_id", "pid"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {"pid": {"type": "integer"}, "sent_bytes": {"type": "integer"}, "stdin_closed": {"type": "boolean"}},
        "required": ["pid", "sent_bytes", "stdin_closed"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", false}, {"openWorldHint", false}},
      .handler = SendProcessInput,
  });
  tools.push_back(ToolSpec{
      .name = "kill_process",
      .title = "Kill process",
      .description = "Sends a signal to a background process: SIGTERM (default) asks it to stop, SIGKILL forces "
                     "it, SIGINT is Ctrl-C. Check the result with read_process_output.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "pid": {"type": "integer", "minimum": 1},
          "signal": {"type": "string", "description": "Signal name (SIGTERM, SIGKILL, SIGINT, HUP...) or number; default SIGTERM."}
        },
        "required": ["sandbox_id", "pid"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {"pid": {"type": "integer"}, "signal": {"type": "string"}, "sent": {"type": "boolean"}},
        "required": ["pid", "signal", "sent"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", true}, {"openWorldHint", false}},
      .handler = KillProcess,
  });
}

}  // namespace bulkhead::mcp
