// A client of one repository of a registry that speaks the OCI distribution API: manifests and
// blobs, with the registry's auth (anonymous, Basic, or the Bearer token dance of
// `WWW-Authenticate: Bearer realm=...,service=...,scope=...`), TLS verified against the system's
// CAs, plain HTTP only where the caller says so, and redirects to blob storage followed without
// the registry's credentials. Blocking: meant for a pull's own thread. Every wait is bounded
// (connect and idle timeouts), and Cancel() from another thread ends a request at once.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bulkhead::storage {

struct RegistryCredentials {
  std::string username;
  std::string password;
};

struct RegistryClientOptions {
  bool plain_http = false;  // only for a registry the user named insecure
  std::optional<RegistryCredentials> credentials;
  std::chrono::milliseconds connect_timeout{15000};
  std::chrono::milliseconds idle_timeout{60000};  // with no byte moving
  std::string ca_file;                             // trusted beside the system's CAs
  // A push: every token asks for pull,push on the repository from the first request on (its
  // blob checks are reads), as Docker's client does, so an account that may push but not pull
  // still can.
  bool push = false;
};

struct FetchedManifest {
  std::string media_type;     // the Content-Type, without parameters
  std::string body;
  std::string digest_header;  // Docker-Content-Digest, "" if none
};

// One challenge of a WWW-Authenticate header: its scheme (lower case) and parameters.
struct AuthChallenge {
  std::string scheme;
  std::map<std::string, std::string> params;  // names lower case
};
// Parses a WWW-Authenticate value (several challenges, quoted strings with escapes).
std::vector<AuthChallenge> ParseAuthChallenges(std::string_view header);

struct Url {
  std::string scheme;  // http | https
  std::string host;    // without brackets for IPv6
  std::string port;
  std::string target;  // path and query, starting with '/'
  std::string Authority() const;  // host[:port] as a Host header says it
};
// An absolute http(s) URL. kInvalid otherwise.
Result<Url> ParseUrl(std::string_view text);
// Where a Location header points, from the URL it was answered to (absolute or relative).
Result<Url> ResolveLocation(const Url& base, std::string_view location);

class RegistryClient {
 public:
  // registry: host[:port] (as in image references); repository: "team/py".
  RegistryClient(std::string registry, std::string repository, RegistryClientOptions options);
  ~RegistryClient();
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  // GET /v2/<repository>/manifests/<reference>, accepting the index and manifest types.
  // kTooLarge past max_bytes (checked on Content-Length before reading, and while reading).
  // 404 -> kNotFound (image_not_found); 401/403 after auth -> kUnauthorized/kForbidden;
  // a registry that cannot be reached or fails -> kBadGateway (registry_unreachable).
  Result<FetchedManifest> GetManifest(const std::string& reference, size_t max_bytes);

  // GET /v2/<repository>/blobs/<digest> from byte `offset` on (Range), each piece of the body
  // handed to `sink`. A server that answers the whole blob rather than the range makes
  // `restart` be called first (the sink starts again from byte 0). More than expected_size
  // bytes in all is an error (kInvalid, blob_too_large, from the sink or here).
  Status FetchBlob(const std::string& digest, uint64_t offset, uint64_t expected_size,
                   const std::function<Status(std::string_view)>& sink, const std::function<Status()>& restart);

  // ---- push ----
  // An upload's bytes: `size` in all, read as pread reads (from `offset`, at most `capacity`).
  struct Body {
    std::string content_type = "application/octet-stream";
    uint64_t size = 0;
    std::function<Result<size_t>(uint64_t offset, char* buffer, size_t capacity)> read;
  };
  // HEAD /v2/<repository>/blobs/<digest>: whether the registry has the blob already.
  Result<bool> HasBlob(const std::string& digest);
  // A monolithic upload: POST /v2/<repository>/blobs/uploads/, then PUT to the Location it
  // answers with ?digest= (or &digest=) and the bytes.
  Status UploadBlob(const std::string& digest, const Body& body);
  // PUT /v2/<repository>/manifests/<reference> (a tag or the manifest's digest).
  Status PutManifest(const std::string& reference, const std::string& media_type, const std::string& manifest);

  // Ends the request under way (and every later one) with kUnavailable. Any thread.
  void Cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulkhead::storage
