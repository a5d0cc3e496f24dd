// `bulkhead mcp` as a model's client drives it: the input is its stdin (newline-delimited
// JSON-RPC), served by the real ServeMcp whose tools call the daemon's real API server in
// front of a fake core (fake_manager.h). If the first byte is even, the session begins with
// the initialize handshake (so the rest goes straight to tools/list and tools/call).
//
// Checked: every output line is one JSON-RPC message, and no request or tool call ends in an
// internal error (the server reports exceptions that escape a handler that way: a bug).
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "client/api_client.h"
#include "fake_manager.h"
#include "fuzz_support.h"
#include "mcp/server.h"

namespace {

using namespace bulkhead;
using nlohmann::json;

const cli::ApiClient* g_api = nullptr;

constexpr std::string_view kHandshake =
    R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},)"
    R"("clientInfo":{"name":"fuzz","version":"1"}}})"
    "\n"
    R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
    "\n";

void CheckMessage(const json& message, const std::string& line) {
  FUZZ_CHECK(message.is_object() && message.value("jsonrpc", "") == "2.0", line);
  if (auto error = message.find("error"); error != message.end()) {
    FUZZ_CHECK((*error)["code"] != -32603, "an internal error: " + line);
  }
  if (auto result = message.find("result"); result != message.end() && result->is_object()) {
    const json& content = result->value("content", json::array());
    for (const json& item : content) {
      const std::string text = item.value("text", "");
      FUZZ_CHECK(text.find("internal error in ") == std::string::npos, "a tool threw: " + line);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string socket_path = fuzz::StartFakeDaemon("mcp");
  cli::ServerAddress address;
  address.kind = cli::ServerAddress::Kind::kUnix;
  address.socket_path = socket_path;
  g_api = new cli::ApiClient(cli::HttpClient(address, fuzz::kFakeDaemonKey), "the fuzz harness");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string input = (data[0] & 1) == 0 ? std::string(kHandshake) : std::string();
  input.append(reinterpret_cast<const char*>(data + 1), size - 1);
  const int in = fuzz::MemoryFile(input);
  const int out = fuzz::MemoryFile({});
  (void)mcp::ServeMcp(*g_api, {.in_fd = in, .out_fd = out});
  const std::string output = fuzz::ReadWholeFd(out);
  ::close(in);
  ::close(out);

  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    FUZZ_CHECK(end != std::string::npos, "an output line without its newline: " + output.substr(start));
    const std::string line = output.substr(start, end - start);
    json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
    FUZZ_CHECK(!message.is_discarded(), "not JSON: " + line);
    if (message.is_array()) {
      for (const json& item : message) CheckMessage(item, line);
    } else {
      CheckMessage(message, line);
    }
    start = end + 1;
  }
  return 0;
}
