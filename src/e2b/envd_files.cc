// envd's /files (e2b-protocol.md §3): GET streams a file of the sandbox (gzip when the client
// accepts it), POST writes one or more (multipart/form-data, or application/octet-stream,
// either possibly gzip-encoded). Both stream with bounded memory: a download is read from the
// sandbox's file worker only as fast as the client takes it, an upload goes to the worker a
// piece at a time as it arrives. Errors are E2B's {"code", "message"}.
#include <algorithm>
#include <set>
#include <vector>

#include <boost/beast/http/field.hpp>
#include <fmt/format.h>

#include "common/ascii.h"
#include "common/bounded_json.h"
#include "e2b/envd.h"
#include "e2b/envd_fs.h"
#include "e2b/envd_paths.h"
#include "e2b/gzip_stream.h"
#include "e2b/multipart.h"
#include "http/client_hangup_watch.h"
#include "http/json_text.h"
#include "service/file_output.h"
#include "service/file_request.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using nlohmann::json;

namespace {

// Decompressed bytes are handed on in slices of at most this.
constexpr size_t kInflateSlice = 256 * 1024;

const std::string* QueryValue(const api::QueryParams& query, std::string_view name) {
  for (const auto& [key, value] : query) {
    if (key == name) return &value;
  }
  return nullptr;
}

std::string_view Header(const api::RequestHeader& request, http::field field) {
  const auto found = request.find(field);
  return found == request.end() ? std::string_view() : api::FromBeast(found->value());
}

// envd 0.6.2: each X-Metadata-<key> header (the first of a name) is metadata of every uploaded
// file, the key lowercased; envd's rules (printable ASCII, a key of at most 246 bytes, 4096
// bytes in all counting the user.e2b. prefixes) or 400 "invalid metadata: …".
Result<json> UploadMetadata(const api::RequestHeader& request) {
  constexpr std::string_view kHeaderPrefix = "x-metadata-";
  constexpr size_t kMaxKeyBytes = 255 - kMetadataXattrPrefix.size();
  constexpr size_t kMaxTotalBytes = 4096;
  json metadata = json::object();
  size_t total = 0;
  auto invalid = [](const std::string& why) { return MakeError(ErrorCode::kBadRequest, "invalid metadata: " + why); };
  auto printable = [](std::string_view text) {
    return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
  };
  for (const auto& field : request) {
    const std::string name = AsciiLower(api::FromBeast(field.name_string()));
    if (!name.starts_with(kHeaderPrefix) || name.size() == kHeaderPrefix.size()) continue;
    const std::string key = name.substr(kHeaderPrefix.size());
    if (metadata.contains(key)) continue;
    const std::string value(api::FromBeast(field.value()));
    if (key.size() > kMaxKeyBytes) return invalid(fmt::format("metadata key \"{}\" exceeds {} bytes", key, kMaxKeyBytes));
    if (!printable(key) || !printable(value)) {
      return invalid(fmt::format("metadata of key \"{}\" is not printable ASCII", key));
    }
    total += kMetadataXattrPrefix.size() + key.size() + value.size();
    metadata[key] = value;
  }
  if (total > kMaxTotalBytes) return invalid(fmt::format("total metadata size {} exceeds {} bytes", total, kMaxTotalBytes));
  return metadata;
}

// Accept-Encoding names gzip with a non-zero q.
bool AcceptsGzip(std::string_view accept) {
  while (!accept.empty()) {
    const size_t comma = accept.find(',');
    std::string_view item = TrimBlanks(accept.substr(0, comma));
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const size_t semicolon = item.find(';');
    const std::string coding = AsciiLower(TrimBlanks(item.substr(0, semicolon)));
    if (coding != "gzip" && coding != "x-gzip") continue;
    if (semicolon == std::string_view::npos) return true;
    const std::string params = AsciiLower(item.substr(semicolon + 1));
    const size_t q = params.find("q=");
    if (q == std::string::npos) return true;
    std::string_view value = TrimBlanks(std::string_view(params).substr(q + 2));
    return !(value.starts_with("0") && value.find_first_not_of("0.", 0) == std::string_view::npos);
  }
  return false;
}

// The user of a /files request: ?username=, else the Basic-auth one, else the sandbox's.
std::optional<std::string> UserOf(const EnvdRequest& request) {
  if (const std::string* username = QueryValue(request.query, "username"); username && !username->empty()) {
    return *username;
  }
  return request.user;
}

asio::awaitable<void> SendFileError(api::HttpExchange& exchange, const Error& error) {
  co_await SendE2bError(exchange, FileHttpStatus(error), error.message);
}

// GET /files: {"size": N} from the read operation, then N bytes, as they are (Content-Length N)
// or gzip-compressed (chunked); or {} and the file to its end, chunked (procfs and the like).
asio::awaitable<void> ServeDownload(EnvdRequest& request) {
  api::HttpExchange& exchange = request.exchange;
  const std::string* path_param = QueryValue(request.query, "path");
  if (!path_param || path_param->empty()) co_return co_await SendE2bError(exchange, 400, "path is required (?path=)");
  Result<SandboxFiles> files = co_await SandboxFiles::Open(request.context.manager, request.sandbox_id, UserOf(request));
  if (!files.ok()) co_return co_await SendFileError(exchange, files.error());
  Result<std::string> path = files->Resolve(*path_param);
  if (!path.ok()) co_return co_await SendFileError(exchange, path.error());

  const json op = {{"op", "read"}, {"path", *path}};
  Result<std::unique_ptr<core::FileOperation>> started = co_await files->Start(op, false);
  if (!started.ok()) co_return co_await SendFileError(exchange, started.error());
  core::FileOperation& operation = **started;
  api::ClientHangupWatch hangup(exchange.stream().socket(), [&operation] { operation.Cancel(); });
  Result<std::pair<std::string, std::string>> first = co_await api::ReadFirstLine(operation);
  if (!first.ok()) {
    if (hangup.client_gone()) {
      exchange.set_keep_alive(false);
      co_return;
    }
    Error error = first.error();
    if (error.detail_code == "not_found") error.message = fmt::format("file not found: {}", *path);
    if (error.detail_code == "invalid_argument" || error.detail_code == "is_a_directory") {
      error.message = fmt::format("path is not a regular file (a directory?): {}", *path);
    }
    co_return co_await SendFileError(exchange, error);
  }
  Result<std::optional<uint64_t>> size = api::ParseReadSize(first->first);
  if (!size.ok()) co_return co_await SendFileError(exchange, size.error());
  const bool gzip = AcceptsGzip(Header(exchange.request(), http::field::accept_encoding));

  if (!gzip) co_return co_await api::SendReadBody(exchange, operation, std::move(first->second), *size);

  exchange.SetResponseHeader(http::field::content_encoding, "gzip");
  if (!co_await exchange.BeginChunked(http::status::ok, "application/octet-stream")) co_return;
  GzipDeflater deflater;
  uint64_t read = 0;
  std::string piece = std::move(first->second);
  for (;;) {
    read += piece.size();
    if (*size && read > **size) {
      exchange.set_keep_alive(false);  // it grew: cut short, so the gzip trailer is missing
      co_return;
    }
    Result<std::string> next = co_await operation.Read();
    if (!next.ok() || (next->empty() && *size && read != **size)) {
      exchange.set_keep_alive(false);  // without the last chunk the client sees it incomplete
      co_return;
    }
    const bool last = next->empty();
    Result<std::string> compressed = deflater.Compress(piece, last);
    if (!compressed.ok()) {
      exchange.set_keep_alive(false);
      co_return;
    }
    if (!compressed->empty() && !co_await exchange.WriteChunk(*compressed)) co_return;
    if (last) break;
    piece = std::move(next.value());
  }
  co_await exchange.EndChunked();
}

// One POST /files: the body (possibly gzip) into one write operation per file.
class Upload {
 public:
  Upload(SandboxFiles& files, std::optional<std::string> path_param, bool gzip, json metadata)
      : files_(files), path_param_(std::move(path_param)), metadata_(std::move(metadata)) {
    if (gzip) inflater_.emplace();
  }

  // application/octet-stream: the whole body is the file at ?path=.
  asio::awaitable<Status> BeginRaw() {
    if (!path_param_) co_return MakeError(ErrorCode::kBadRequest, "path is required (?path=) for an octet-stream upload");
    co_return co_await OpenFile(*path_param_);
  }
  void BeginMultipart(std::string boundary) { parser_.emplace(std::move(boundary)); }

  // A piece of the body as it arrived.
  asio::awaitable<Status> Consume(std::string_view piece) {
    if (!inflater_) co_return co_await Decoded(piece);
    inflater_->SetInput(piece);
    for (;;) {
      Result<std::string> slice = inflater_->Next(kInflateSlice);
      if (!slice.ok()) co_return slice.error();
      if (slice->empty()) co_return Status{};
      if (Status handled = co_await Decoded(*slice); !handled.ok()) co_return handled;
    }
  }

  // The body ended: the last file is completed. Answers what was written.
  asio::awaitable<Result<json>> Finish() {
    if (inflater_ && !inflater_->ended()) co_return MakeError(ErrorCode::kBadRequest, "the gzip body is truncated");
    if (parser_) {
      if (Status complete = parser_->Finish(); !complete.ok()) co_return complete.error();
      if (written_.empty()) co_return MakeError(ErrorCode::kBadRequest, "the multipart body has no part named \"file\"");
    } else if (Status closed = co_await CloseFile(); !closed.ok()) {
      co_return closed.error();
    }
    co_return written_;
  }

  // Stops the write under way (its file is left as it was: the worker writes a temporary).
  // The operation itself stays until its calls under way have returned.
  void Cancel() {
    if (current_) current_->Cancel();
  }

  // Called when a file's worker ends before its input did (a read-only path, a full disk): the
  // request stops waiting for more of the body.
  void WhenAWorkerStops(std::function<void()> hook) { when_a_worker_stops_ = std::move(hook); }

  // The real error of a write whose worker stopped taking input, if that was the trouble.
  asio::awaitable<std::optional<Error>> WorkerError() {
    if (!current_ || !worker_stopped_) co_return std::nullopt;
    Result<std::string> answer = co_await current_->Finish(kMaxFileAnswerBytes);
    current_.reset();
    if (!answer.ok()) co_return answer.error();
    co_return std::nullopt;
  }

 private:
  asio::awaitable<Status> Decoded(std::string_view data) {
    if (!parser_) co_return co_await WriteFile(data);
    events_.clear();
    if (Status parsed = parser_->Feed(data, events_); !parsed.ok()) co_return parsed;
    for (MultipartParser::Event& event : events_) {
      switch (event.kind) {
        case MultipartParser::Event::kPartBegin:
          skipping_ = event.part.name != "file";  // envd ignores other form fields
          if (skipping_) break;
          if (path_param_) {
            if (Status opened = co_await OpenFile(*path_param_); !opened.ok()) co_return opened;
          } else if (!event.part.filename || event.part.filename->empty()) {
            co_return MakeError(ErrorCode::kBadRequest, "a part named \"file\" has no filename (the target path) and "
                                                        "there is no ?path=");
          } else if (Status opened = co_await OpenFile(*event.part.filename); !opened.ok()) {
            co_return opened;
          }
          break;
        case MultipartParser::Event::kData:
          if (!skipping_) {
            if (Status written = co_await WriteFile(event.data); !written.ok()) co_return written;
          }
          break;
        case MultipartParser::Event::kPartEnd:
          if (!skipping_) {
            if (Status closed = co_await CloseFile(); !closed.ok()) co_return closed;
          }
          skipping_ = false;
          break;
      }
    }
    co_return Status{};
  }

  asio::awaitable<Status> OpenFile(const std::string& given) {
    Result<std::string> path = files_.Resolve(given);
    if (!path.ok()) co_return path.error();
    if (!paths_.insert(*path).second) {
      co_return MakeError(ErrorCode::kBadRequest, fmt::format("you cannot upload multiple files to the same path '{}' "
                                                              "in one upload request",
                                                              *path));
    }
    // Always given: an overwrite replaces the file's whole metadata (none if none is sent).
    const json op = {{"op", "write"}, {"path", *path}, {"parents", true}, {"append", false}, {"xattrs", metadata_}};
    Result<std::unique_ptr<core::FileOperation>> started = co_await files_.Start(op, true);
    if (!started.ok()) co_return started.error();
    current_ = std::move(started.value());
    current_path_ = *path;
    worker_stopped_ = false;
    current_->WhenEnded([this] {
      worker_stopped_ = true;
      if (when_a_worker_stops_) when_a_worker_stops_();
    });
    co_return Status{};
  }

  asio::awaitable<Status> WriteFile(std::string_view data) {
    if (!current_) co_return Status{};
    Status sent = co_await current_->Write(data);
    if (!sent.ok()) worker_stopped_ = true;
    co_return sent;
  }

  asio::awaitable<Status> CloseFile() {
    if (!current_) co_return Status{};
    current_->WhenEnded(nullptr);  // (its input is all there: it ends now)
    (void)co_await current_->CloseInput();  // if it fails, Finish says why
    Result<std::string> answer = co_await current_->Finish(kMaxFileAnswerBytes);
    current_.reset();
    if (!answer.ok()) co_return answer.error();
    json written = {{"name", BaseName(current_path_)}, {"type", "file"}, {"path", current_path_}};
    // As envd: the metadata read back from the file (none where the filesystem keeps none).
    const json entry = ParseBoundedJson(std::string_view(*answer).substr(0, answer->find('\n')));
    if (entry.is_object()) {
      if (auto xattrs = entry.find("xattrs"); xattrs != entry.end() && xattrs->is_object() && !xattrs->empty()) {
        written["metadata"] = *xattrs;
      }
    }
    written_.push_back(std::move(written));
    co_return Status{};
  }

  SandboxFiles& files_;
  std::optional<std::string> path_param_;
  json metadata_;
  std::optional<GzipInflater> inflater_;
  std::optional<MultipartParser> parser_;
  std::vector<MultipartParser::Event> events_;
  bool skipping_ = false;
  std::unique_ptr<core::FileOperation> current_;
  std::string current_path_;
  bool worker_stopped_ = false;
  std::function<void()> when_a_worker_stops_;
  std::set<std::string> paths_;
  json written_ = json::array();
};

asio::awaitable<void> ServeUpload(EnvdRequest& request) {
  api::HttpExchange& exchange = request.exchange;
  const std::string_view content_type = Header(exchange.request(), http::field::content_type);
  const std::string media_type = AsciiLower(TrimBlanks(content_type.substr(0, content_type.find(';'))));
  const std::string encoding = AsciiLower(TrimBlanks(Header(exchange.request(), http::field::content_encoding)));
  if (!encoding.empty() && encoding != "identity" && encoding != "gzip" && encoding != "x-gzip") {
    co_return co_await SendE2bError(exchange, 400, fmt::format("unsupported Content-Encoding {} (gzip or identity)", encoding));
  }
  std::optional<std::string> boundary;
  if (media_type != "application/octet-stream") {
    Result<std::string> found = MultipartBoundary(content_type);
    if (!found.ok()) co_return co_await SendE2bError(exchange, 400, found.error().message);
    boundary = std::move(*found);
  }
  std::optional<std::string> path_param;
  if (const std::string* path = QueryValue(request.query, "path"); path && !path->empty()) path_param = *path;

  Result<json> metadata = UploadMetadata(exchange.request());
  if (!metadata.ok()) co_return co_await SendE2bError(exchange, 400, metadata.error().message);
  Result<SandboxFiles> files = co_await SandboxFiles::Open(request.context.manager, request.sandbox_id, UserOf(request));
  if (!files.ok()) co_return co_await SendFileError(exchange, files.error());
  Upload upload(*files, path_param, !encoding.empty() && encoding != "identity", std::move(*metadata));
  if (boundary) {
    upload.BeginMultipart(std::move(*boundary));
  } else if (Status begun = co_await upload.BeginRaw(); !begun.ok()) {
    co_return co_await SendFileError(exchange, begun.error());
  }

  const api::HttpExchange::BodySink sink = [&upload](std::string_view piece) -> asio::awaitable<Status> {
    co_return co_await upload.Consume(piece);
  };
  upload.WhenAWorkerStops([&exchange] {
    exchange.set_keep_alive(false);  // (the rest of the body stays unread)
    exchange.stream().cancel();
  });
  Result<uint64_t> received = co_await exchange.ReadBodyStreamed(api::kMaxFileUpload, sink);
  upload.WhenAWorkerStops(nullptr);
  if (!received.ok()) {
    // A worker that stopped taking input knows why (disk full, permission denied).
    std::optional<Error> worker = co_await upload.WorkerError();
    upload.Cancel();
    co_return co_await SendFileError(exchange, worker ? *worker : received.error());
  }
  // With the whole body read, a client that hangs up while the last file is completed
  // cancels it.
  api::ClientHangupWatch hangup(exchange.stream().socket(), [&upload] { upload.Cancel(); });
  Result<json> written = co_await upload.Finish();
  if (hangup.client_gone()) {
    exchange.set_keep_alive(false);
    co_return;
  }
  if (!written.ok()) {
    upload.Cancel();
    co_return co_await SendFileError(exchange, written.error());
  }
  co_await exchange.SendText(http::status::ok, "application/json", api::DumpJson(*written));
}

}  // namespace

boost::asio::awaitable<void> ServeFiles(EnvdRequest& request) {
  const http::verb method = request.exchange.request().method();
  if (method == http::verb::get) co_return co_await ServeDownload(request);
  if (method == http::verb::post) co_return co_await ServeUpload(request);
  request.exchange.SetResponseHeader(http::field::allow, "GET, POST");
  co_await SendE2bError(request.exchange, 405, "/files takes GET (read) and POST (write)");
}

}  // namespace bulkhead::e2b
