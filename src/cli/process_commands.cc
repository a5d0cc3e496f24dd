#include "cli/process_commands.h"

#include <ctime>

#include "cli/listing_format.h"
#include "client/line_splitter.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

std::string StreamName(const json& event) {
  auto stream = event.find("stream");
  return stream != event.end() && stream->is_string() ? stream->get<std::string>() : "output";
}

std::string OffsetText(const json& event, const char* field) {
  auto offset = event.find(field);
  return offset != event.end() && offset->is_number_integer() ? std::to_string(offset->get<int64_t>()) : "?";
}

}  // namespace

int DetachedExecCommand(Session& session, json request) {
  if (session.line.tag) request["tag"] = *session.line.tag;
  auto process = session.api.Call(HttpMethod::kPost, SandboxPath(session.line.sandbox_id) + "/processes", request);
  if (!process.ok()) return session.Fail(process.error());
  auto pid = process->is_object() ? process->find("pid") : process->end();
  if (pid == process->end() || !pid->is_number_integer()) {
    return session.Fail(MakeError(ErrorCode::kInternal, "the daemon's answer has no pid", "bad_response"));
  }
  session.Out(std::to_string(pid->get<int64_t>()) + "\n");
  return 0;
}

int ProcessListCommand(Session& session) {
  auto listing = session.api.Call(HttpMethod::kGet, SandboxPath(session.line.sandbox_id) + "/processes");
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  json processes = listing->is_object() ? listing->value("processes", json::array()) : json::array();
  session.Out(FormatProcessTable(processes, static_cast<int64_t>(std::time(nullptr))));
  return 0;
}

int LogsCommand(Session& session) {
  const CommandLine& line = session.line;
  std::string target = ProcessPath(line.sandbox_id, line.process) +
                       "/output?offset=" + std::to_string(line.offset.value_or(0)) +
                       "&follow=" + (line.follow ? "true" : "false");
  auto output = session.api.Download(target, "application/x-ndjson");
  if (!output.ok()) return session.Fail(output.error());

  ExecOutputPrinter printer(OutputFds{session.io.stdout_fd, session.io.stderr_fd});
  auto print = [&session, &printer](std::string_view text) -> Status {
    json event = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded() || !event.is_object()) {
      return MakeError(ErrorCode::kInternal, "unexpected answer from the daemon: an output line is not JSON",
                       "bad_response");
    }
    if (event.value("type", "") == "gap") {
      // The ring dropped output this reader had not seen: say so rather than splice silently.
      session.Err("bulkhead: " + StreamName(event) + " bytes " + OffsetText(event, "from") + ".." +
                  OffsetText(event, "to") + " are no longer kept\n");
      return {};
    }
    return printer.HandleEvent(event);
  };
  LineSplitter splitter;
  for (;;) {
    auto piece = output->Read();
    if (!piece.ok()) return session.Fail(piece.error());
    if (piece->empty()) break;
    if (Status printed = splitter.Feed(*piece, print); !printed.ok()) return session.Fail(printed.error());
  }
  if (Status printed = splitter.Finish(print); !printed.ok()) return session.Fail(printed.error());
  if (!line.follow) return 0;
  if (!printer.outcome()) {
    return session.Fail(
        MakeError(ErrorCode::kUnavailable, "the output stream ended before the process exited", "stream_ended"));
  }
  return ShellExitCode(*printer.outcome());
}

int KillCommand(Session& session) {
  const CommandLine& line = session.line;
  std::optional<int> signal = ParseSignal(line.signal);
  if (!signal) return session.UsageError("unknown signal '" + line.signal + "' (use a name like TERM or a number)");
  json request = {{"signal", *signal}};
  auto sent = session.api.Call(HttpMethod::kPost, ProcessPath(line.sandbox_id, line.process) + "/signal", request);
  if (!sent.ok()) return session.Fail(sent.error());
  return 0;
}

}  // namespace bulkhead::cli
