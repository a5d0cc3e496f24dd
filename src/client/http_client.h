// A small blocking HTTP/1.1 client for the daemon's API, over a unix socket or TCP.
// One connection per request: the CLI makes few requests and this keeps failure simple.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "client/line_splitter.h"
#include "client/server_url.h"
#include "common/result.h"

namespace bulkhead::cli {

enum class HttpMethod { kGet, kPost, kPut, kPatch, kDelete };

struct HttpResponse {
  int status = 0;
  std::string content_type;  // without parameters, lower case
  std::string body;          // empty when the body was handed out as lines
  bool ok() const { return status >= 200 && status < 300; }
};

// Takes one piece of a request body and sends it.
using BodyChunkSink = std::function<Status(std::string_view chunk)>;
// Produces a request body by pushing it through the sink piece by piece.
using BodyProducer = std::function<Status(const BodyChunkSink& sink)>;

// A response whose body is read piece by piece as it arrives (downloads, tar streams,
// endless event streams), in bounded memory. Holds its connection until destroyed.
class StreamedResponse {
 public:
  StreamedResponse(StreamedResponse&&) noexcept;
  StreamedResponse& operator=(StreamedResponse&&) noexcept;
  ~StreamedResponse();

  int status() const;
  bool ok() const { return status() >= 200 && status() < 300; }
  const std::string& content_type() const;  // without parameters, lower case
  std::optional<uint64_t> content_length() const;

  // The next piece of the body, valid until the next call; empty once the body ended.
  Result<std::string_view> Read();
  // The rest of the body collected in memory (bounded), e.g. an error answer.
  Result<HttpResponse> ReadRest();

 private:
  friend class HttpClient;
  struct State;
  explicit StreamedResponse(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Ends requests under way from another thread (`bulkhead mcp`, whose client may cancel a
// tool call): their sockets are shut down, so a blocked read or write fails at once. Once
// cancelled, every later request through it fails before connecting.
class RequestCanceller {
 public:
  void Cancel();
  bool cancelled() const;

  // Called by the client's connections: a socket to shut down on Cancel. Attach fails when
  // already cancelled.
  Status Attach(int fd);
  void Detach(int fd);

 private:
  mutable std::mutex mutex_;
  std::set<int> fds_;
  bool cancelled_ = false;
};

class HttpClient {
 public:
  HttpClient(ServerAddress address, std::string api_key);

  // A copy of this client whose requests `canceller` can end.
  HttpClient WithCanceller(std::shared_ptr<RequestCanceller> canceller) const;

  // A request with an optional JSON body (`json_body` already serialized; empty = none).
  Result<HttpResponse> Send(HttpMethod method, const std::string& target,
                            const std::string& json_body = {}) const;

  // A request whose body is produced while it is sent: chunked, or with Content-Length
  // when `content_length` is known. Memory stays bounded whatever the body's size. With
  // `on_line`, an NDJSON answer is handed over line by line (as SendForLines).
  Result<HttpResponse> SendStreamingBody(HttpMethod method, const std::string& target,
                                         const std::string& content_type,
                                         std::optional<uint64_t> content_length,
                                         const BodyProducer& produce, const LineHandler* on_line = nullptr) const;

  // A JSON request answered with NDJSON (`Accept: application/x-ndjson`). A 2xx NDJSON
  // response is handed to `on_line` line by line as it arrives; any other response
  // (an error, or a plain JSON answer) comes back whole in `body`.
  Result<HttpResponse> SendForLines(HttpMethod method, const std::string& target,
                                    const std::string& json_body, const LineHandler& on_line) const;

  // A request without a body whose answer is read by the caller as it arrives; returns
  // once the response's header is in.
  Result<StreamedResponse> Open(HttpMethod method, const std::string& target, const std::string& accept) const;

  const ServerAddress& address() const { return address_; }
  const std::string& api_key() const { return api_key_; }

 private:
  ServerAddress address_;
  std::string api_key_;
  std::shared_ptr<RequestCanceller> canceller_;  // may be null
};

}  // namespace bulkhead::cli
