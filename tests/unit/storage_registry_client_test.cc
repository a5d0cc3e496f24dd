// The registry client: its parsers (WWW-Authenticate challenges, URLs, Location headers) on
// their own, then the client end to end against small servers on 127.0.0.1 (plain sockets,
// optionally TLS with a CA made here), which script each answer byte for byte so the tests
// control auth, redirects, ranges, chunking, stalls and dropped connections exactly. Nothing
// but 127.0.0.1 is ever contacted.
#include "storage/registry_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "common/unique_fd.h"
#include "storage/oci_manifest.h"

namespace bulkhead::storage {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kDigest = "sha256:" + std::string(64, 'a');
const std::string kRepo = "team/py";

// ---- Parsers

const AuthChallenge* Find(const std::vector<AuthChallenge>& challenges, const std::string& scheme) {
  for (const AuthChallenge& c : challenges)
    if (c.scheme == scheme) return &c;
  return nullptr;
}

std::string Param(const AuthChallenge* challenge, const std::string& name) {
  if (!challenge) return "<no challenge>";
  auto it = challenge->params.find(name);
  return it == challenge->params.end() ? "<none>" : it->second;
}

TEST(RegistryAuthChallengeTest, ReadsTheBearerChallengeOfADistributionRegistry) {
  auto challenges = ParseAuthChallenges(
      R"(Bearer realm="https://auth.example/token",service="registry.example",scope="repository:team/py:pull")");
  ASSERT_EQ(challenges.size(), 1u);
  EXPECT_EQ(challenges[0].scheme, "bearer");
  EXPECT_EQ(Param(&challenges[0], "realm"), "https://auth.example/token");
  EXPECT_EQ(Param(&challenges[0], "service"), "registry.example");
  EXPECT_EQ(Param(&challenges[0], "scope"), "repository:team/py:pull");
}

TEST(RegistryAuthChallengeTest, SchemesAndNamesAreCaseInsensitiveAndCommasInQuotesStay) {
  auto challenges = ParseAuthChallenges(R"(BEARER Realm="https://a/t", SCOPE="repository:a/b:pull,push")");
  const AuthChallenge* bearer = Find(challenges, "bearer");
  EXPECT_EQ(Param(bearer, "realm"), "https://a/t");
  EXPECT_EQ(Param(bearer, "scope"), "repository:a/b:pull,push");
}

TEST(RegistryAuthChallengeTest, ReadsSeveralChallengesInOneHeader) {
  auto challenges = ParseAuthChallenges(R"(Basic realm="Registry Realm", Bearer realm="https://t/token",service="s")");
  ASSERT_EQ(challenges.size(), 2u);
  EXPECT_EQ(Param(Find(challenges, "basic"), "realm"), "Registry Realm");
  EXPECT_EQ(Param(Find(challenges, "bearer"), "realm"), "https://t/token");
  EXPECT_EQ(Param(Find(challenges, "bearer"), "service"), "s");

  // A scheme with no parameters before another.
  challenges = ParseAuthChallenges(R"(Negotiate, Bearer realm="https://t/token")");
  EXPECT_NE(Find(challenges, "negotiate"), nullptr);
  EXPECT_EQ(Param(Find(challenges, "bearer"), "realm"), "https://t/token");
}

TEST(RegistryAuthChallengeTest, UnescapesQuotedStringsAndTakesTokensAndSpacesAroundEquals) {
  auto challenges = ParseAuthChallenges(R"(Bearer realm="a\"b\\c" , service = svc ,scope= "x y")");
  const AuthChallenge* bearer = Find(challenges, "bearer");
  EXPECT_EQ(Param(bearer, "realm"), R"(a"b\c)");
  EXPECT_EQ(Param(bearer, "service"), "svc");
  EXPECT_EQ(Param(bearer, "scope"), "x y");
}

TEST(RegistryAuthChallengeTest, HostileHeadersEndWithoutThrowingOrLooping) {
  const std::vector<std::string> hostile = {
      "",
      ",,, ,",
      "=",
      "==,=",
      "Bearer",
      "Bearer realm=",
      "Bearer realm=\"unterminated",
      "Bearer realm=\"ends in a backslash\\",
      "Bearer realm=\"x\",service=\"unterminated, Basic realm=\"y\"",
      "Bearer ,,,realm=\"x\"",
      "Basic dGVzdDp0ZXN0==",
      std::string(100000, '"'),
      std::string(100000, '='),
      std::string(100000, ','),
      "Bearer " + std::string(100000, 'a') + "=",
      std::string("Bearer realm=\"a\0b\"", 19),
  };
  for (const std::string& header : hostile) {
    EXPECT_NO_THROW((void)ParseAuthChallenges(header)) << header.substr(0, 60);
  }
  // What comes before the damage is still read.
  std::vector<AuthChallenge> challenges;
  EXPECT_NO_THROW(challenges = ParseAuthChallenges("Bearer realm=\"https://t/token\",service=\"unterminated"));
  EXPECT_EQ(Param(Find(challenges, "bearer"), "realm"), "https://t/token");
}

TEST(RegistryUrlTest, ParsesHttpAndHttpsUrlsWithDefaultAndExplicitPorts) {
  auto url = ParseUrl("https://registry.example/v2/");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->scheme, "https");
  EXPECT_EQ(url->host, "registry.example");
  EXPECT_EQ(url->port, "443");
  EXPECT_EQ(url->target, "/v2/");
  EXPECT_EQ(url->Authority(), "registry.example");

  url = ParseUrl("HTTP://127.0.0.1:5000");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->scheme, "http");
  EXPECT_EQ(url->port, "5000");
  EXPECT_EQ(url->target, "/");
  EXPECT_EQ(url->Authority(), "127.0.0.1:5000");

  url = ParseUrl("https://[::1]:8443/a?b=c#fragment");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->target, "/a?b=c") << "the fragment never goes out";
  EXPECT_EQ(url->Authority(), "[::1]:8443");

  url = ParseUrl("http://h?x=1");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->target, "/?x=1");
  EXPECT_EQ(url->Authority(), "h");
}

TEST(RegistryUrlTest, RefusesOtherSchemesUserinfoBadPortsAndAnythingThatCouldSplitARequest) {
  for (const char* bad : {"ftp://h/", "h/path", "/relative", "https://user:pw@h/", "https://h:12ab/", "https:///path",
                          "https://[::1/", "https://[::1]x/", "https://h/a b", "https://h/a\r\nX-Injected: 1",
                          "https://h/\x7f"}) {
    EXPECT_FALSE(ParseUrl(bad).ok()) << bad;
  }
}

TEST(RegistryUrlTest, ResolvesLocationsAbsoluteSchemeRelativeAndRelative) {
  const Url base = *ParseUrl("https://reg.example:5000/v2/team/py/blobs/uploads/");

  auto url = ResolveLocation(base, "/v2/team/py/blobs/uploads/u-1?_state=abc");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->Authority(), "reg.example:5000");
  EXPECT_EQ(url->scheme, "https");
  EXPECT_EQ(url->target, "/v2/team/py/blobs/uploads/u-1?_state=abc");

  url = ResolveLocation(base, "u-2?_state=x");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->target, "/v2/team/py/blobs/uploads/u-2?_state=x");

  url = ResolveLocation(*ParseUrl("https://reg.example/v2/r/blobs/sha?x=/y/z"), "other");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->target, "/v2/r/blobs/other") << "the base's query is no directory";

  url = ResolveLocation(base, "https://storage.example/bucket/object?X-Sig=a%2Fb");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->Authority(), "storage.example");
  EXPECT_EQ(url->target, "/bucket/object?X-Sig=a%2Fb");

  url = ResolveLocation(base, "http://127.0.0.1:9000/o");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->scheme, "http");
  EXPECT_EQ(url->Authority(), "127.0.0.1:9000");

  url = ResolveLocation(base, "//cdn.example:8443/o");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->scheme, "https") << "a scheme-relative Location keeps the base's scheme";
  EXPECT_EQ(url->Authority(), "cdn.example:8443");
  EXPECT_EQ(url->target, "/o");

  EXPECT_FALSE(ResolveLocation(base, "").ok());
  EXPECT_FALSE(ResolveLocation(base, "/a b").ok());
  EXPECT_FALSE(ResolveLocation(base, "/a\r\nSet-Cookie: x").ok());
  EXPECT_FALSE(ResolveLocation(base, "ftp://h/x").ok());
  EXPECT_FALSE(ResolveLocation(base, "https://user@h/x").ok());
}

// ---- A scripted server on 127.0.0.1

struct Request {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // names lower case
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct SslDeleter {
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
  void operator()(SSL* p) const { SSL_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};
template <typename T>
using SslPtr = std::unique_ptr<T, SslDeleter>;

class LoopbackServer;

// The server's side of one connection: the test's handler writes the answer raw.
class Conversation {
 public:
  Conversation(LoopbackServer& server, int fd, SSL* tls) : server_(server), fd_(fd), tls_(tls) {}

  bool Write(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = tls_ ? SSL_write(tls_, bytes.data(), static_cast<int>(bytes.size()))
                             : send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void Respond(int status, const std::string& body, const std::vector<std::string>& headers = {}) {
    std::string head = "HTTP/1.1 " + std::to_string(status) + " Scripted\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (const std::string& h : headers) head += h + "\r\n";
    Write(head + "\r\n" + body);
  }
  void RespondChunked(int status, const std::vector<std::string>& chunks, const std::vector<std::string>& headers = {}) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " Scripted\r\nTransfer-Encoding: chunked\r\n";
    for (const std::string& h : headers) out += h + "\r\n";
    out += "\r\n";
    for (const std::string& c : chunks) {
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", c.size());
      out += size + c + "\r\n";
    }
    Write(out + "0\r\n\r\n");
  }
  void Stall();  // until the server is torn down
  bool SleepUnlessStopping(std::chrono::milliseconds time);

 private:
  LoopbackServer& server_;
  int fd_;
  SSL* tls_;
};

using Handler = std::function<void(const Request&, Conversation&)>;

// Answers every connection on 127.0.0.1 with `handler` (one request a connection: the client
// closes after each), recording each request. With a TLS context, speaks TLS.
class LoopbackServer {
 public:
  explicit LoopbackServer(Handler handler, SSL_CTX* tls = nullptr) : handler_(std::move(handler)), tls_(tls) {
    listener_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener_.get(), 64), 0);
    socklen_t length = sizeof(address);
    getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    int pipe_fds[2];
    EXPECT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
    wake_read_ = UniqueFd(pipe_fds[0]);
    wake_write_ = UniqueFd(pipe_fds[1]);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~LoopbackServer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    }
    stopped_.notify_all();
    (void)!write(wake_write_.get(), "x", 1);
    accept_thread_.join();
    for (auto& t : threads_) t.join();
  }

  uint16_t port() const { return port_; }
  std::string authority() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<Request> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  size_t count() { return requests().size(); }

 private:
  friend class Conversation;

  static void BlockSigpipe() {
    // A TLS write to a client that has gone raises SIGPIPE in the writing thread: keep it there.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }

  void AcceptLoop() {
    BlockSigpipe();
    for (;;) {
      pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents) return;
      int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mutex_);
      if (stopping_) {
        close(fd);
        return;
      }
      open_fds_.insert(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  void Serve(int fd) {
    BlockSigpipe();
    timeval timeout{10, 0};  // a client that never speaks does not hold the test up forever
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    SslPtr<SSL> tls;
    if (tls_) {
      tls.reset(SSL_new(tls_));
      SSL_set_fd(tls.get(), fd);
      if (SSL_accept(tls.get()) != 1) tls.reset();
    }
    if (!tls_ || tls) {
      auto request = ReadRequest(fd, tls.get());
      if (request) {
        {
          std::lock_guard lock(mutex_);
          requests_.push_back(*request);
        }
        Conversation conversation(*this, fd, tls.get());
        handler_(*request, conversation);
      }
      if (tls) SSL_shutdown(tls.get());
    }
    std::lock_guard lock(mutex_);
    open_fds_.erase(fd);
    close(fd);
  }

  static std::optional<Request> ReadRequest(int fd, SSL* tls) {
    std::string data;
    char buffer[16384];
    size_t head_end;
    while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = tls ? SSL_read(tls, buffer, sizeof(buffer)) : recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0 || data.size() > (1 << 20)) return std::nullopt;
      data.append(buffer, static_cast<size_t>(n));
    }
    Request request;
    std::string head = data.substr(0, head_end);
    std::string body = data.substr(head_end + 4);
    size_t line_end = head.find("\r\n");
    std::string line = head.substr(0, line_end);
    request.method = line.substr(0, line.find(' '));
    request.target = line.substr(line.find(' ') + 1, line.rfind(' ') - line.find(' ') - 1);
    while (line_end != std::string::npos) {
      size_t next = head.find("\r\n", line_end + 2);
      std::string header = head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
      line_end = next;
      size_t colon = header.find(':');
      if (colon == std::string::npos) continue;
      std::string name = header.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = header.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      request.headers[name] = value;
    }
    const size_t length = request.headers.count("content-length") ? std::stoul(request.headers["content-length"]) : 0;
    while (body.size() < length) {
      const ssize_t n = tls ? SSL_read(tls, buffer, sizeof(buffer)) : recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return std::nullopt;
      body.append(buffer, static_cast<size_t>(n));
    }
    request.body = std::move(body);
    return request;
  }

  Handler handler_;
  SSL_CTX* tls_;
  UniqueFd listener_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::mutex mutex_;
  std::condition_variable stopped_;
  bool stopping_ = false;
  std::set<int> open_fds_;
  std::vector<std::thread> threads_;
  std::vector<Request> requests_;
};

void Conversation::Stall() {
  std::unique_lock lock(server_.mutex_);
  server_.stopped_.wait(lock, [&] { return server_.stopping_; });
}

bool Conversation::SleepUnlessStopping(std::chrono::milliseconds time) {
  std::unique_lock lock(server_.mutex_);
  return !server_.stopped_.wait_for(lock, time, [&] { return server_.stopping_; });
}

// ---- Helpers

RegistryClientOptions PlainOptions() {
  RegistryClientOptions options;
  options.plain_http = true;
  options.connect_timeout = 5s;
  options.idle_timeout = 5s;
  return options;
}

RegistryClientOptions WithLogin(RegistryClientOptions options) {
  options.credentials = RegistryCredentials{"alice", "s3cret"};
  return options;
}

const std::string kBasicAlice = "Basic " + Base64Encode("alice:s3cret");

std::string ErrorBody(const std::string& code, const std::string& message) {
  return R"({"errors":[{"code":")" + code + R"(","message":")" + message + R"(","detail":null}]})";
}

struct Collected {
  std::string bytes;
  int restarts = 0;
  std::function<Status(std::string_view)> sink = [this](std::string_view piece) -> Status {
    bytes.append(piece);
    return {};
  };
  std::function<Status()> restart = [this]() -> Status {
    ++restarts;
    bytes.clear();
    return {};
  };
};

// How long `work` took.
template <typename F>
Clock::duration Timed(F&& work) {
  const auto start = Clock::now();
  work();
  return Clock::now() - start;
}

// ---- Manifests

TEST(RegistryClientTest, GetManifestAsksForTheFourManifestTypesAndReturnsBodyTypeAndDigest) {
  const std::string manifest = R"({"schemaVersion":2})";
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(200, manifest,
              {"Content-Type: application/vnd.oci.image.manifest.v1+json; charset=utf-8",
               "Docker-Content-Digest: " + kDigest});
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("3.12", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(fetched->body, manifest);
  EXPECT_EQ(fetched->media_type, media_type::kOciManifest);
  EXPECT_EQ(fetched->digest_header, kDigest);

  auto requests = registry.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].target, "/v2/team/py/manifests/3.12");
  EXPECT_EQ(requests[0].Header("host"), registry.authority());
  EXPECT_EQ(requests[0].Header("authorization"), "") << "anonymous until challenged";
  const std::string accept = requests[0].Header("accept");
  for (const char* type : {media_type::kOciIndex, media_type::kDockerList, media_type::kOciManifest,
                           media_type::kDockerManifest}) {
    EXPECT_NE(accept.find(type), std::string::npos) << accept;
  }
}

TEST(RegistryClientTest, GetManifestReadsAChunkedBody) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.RespondChunked(200, {"{\"schema", "Version\":", "2}"}, {"Content-Type: " + std::string(media_type::kOciIndex)});
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest(kDigest, 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(fetched->body, R"({"schemaVersion":2})");
  EXPECT_EQ(fetched->media_type, media_type::kOciIndex);
  EXPECT_EQ(fetched->digest_header, "");
}

TEST(RegistryClientTest, AManifestOverTheLimitIsRefusedByItsLengthOrWhileReading) {
  LoopbackServer by_length([&](const Request&, Conversation& c) { c.Respond(200, std::string(101, 'x')); });
  RegistryClient client(by_length.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 100);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kTooLarge);

  // Chunked: no length to check first, so the reading stops once past the limit.
  LoopbackServer chunked([&](const Request&, Conversation& c) {
    c.RespondChunked(200, std::vector<std::string>(64, std::string(1000, 'x')));
  });
  RegistryClient client2(chunked.authority(), kRepo, PlainOptions());
  fetched = client2.GetManifest("latest", 2500);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kTooLarge);

  LoopbackServer exact([&](const Request&, Conversation& c) { c.Respond(200, std::string(100, 'x')); });
  RegistryClient client3(exact.authority(), kRepo, PlainOptions());
  EXPECT_TRUE(client3.GetManifest("latest", 100).ok()) << "the limit itself is allowed";
}

TEST(RegistryClientTest, AMissingManifestIsNotFoundWithTheRegistrysOwnWordsSanitized) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(404, ErrorBody("MANIFEST_UNKNOWN", "no such tag\\n\\u001b[31m here"), {"Content-Type: application/json"});
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("nope", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(fetched.error().detail_code, "image_not_found");
  const std::string& message = fetched.error().message;
  EXPECT_NE(message.find("MANIFEST_UNKNOWN"), std::string::npos) << message;
  EXPECT_NE(message.find("no such tag"), std::string::npos) << message;
  for (char ch : message) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "a control byte in: " << message;
}

TEST(RegistryClientTest, ALongErrorMessageIsBounded) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(500, ErrorBody("UNKNOWN", std::string(20000, 'z')));
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(fetched.error().detail_code, "registry_unreachable");
  EXPECT_NE(fetched.error().message.find("zzzz"), std::string::npos);
  EXPECT_LT(fetched.error().message.size(), 1000u);
}

TEST(RegistryClientTest, AnErrorWithAHugeBodyKeepsItsStatus) {
  // A proxy's HTML page, say: the status is what matters, not the page's size.
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(404, std::string(1 << 20, '<'), {"Content-Type: text/html"});
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kNotFound) << fetched.error().message;
  EXPECT_LT(fetched.error().message.size(), 1000u);
}

TEST(RegistryClientTest, ServerErrorsAndRefusedConnectionsAreBadGatewayNamingTheRegistry) {
  LoopbackServer registry([&](const Request&, Conversation& c) { c.Respond(503, "busy"); });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(fetched.error().detail_code, "registry_unreachable");
  EXPECT_NE(fetched.error().message.find("503"), std::string::npos) << fetched.error().message;
  EXPECT_NE(fetched.error().message.find(registry.authority()), std::string::npos) << fetched.error().message;

  // A port nothing listens on: bind one, note it, close it.
  std::string closed;
  {
    LoopbackServer gone([](const Request&, Conversation&) {});
    closed = gone.authority();
  }
  RegistryClient refused(closed, kRepo, PlainOptions());
  fetched = refused.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(fetched.error().detail_code, "registry_unreachable");
  EXPECT_NE(fetched.error().message.find(closed), std::string::npos) << fetched.error().message;
}

// ---- Auth

// A token server issuing "tok-1", "tok-2", ... and recording what it was asked.
struct TokenServer {
  std::atomic<int> issued{0};
  std::string field = "token";
  LoopbackServer server{[this](const Request&, Conversation& c) {
    c.Respond(200, R"({")" + field + R"(":"tok-)" + std::to_string(++issued) + R"(","expires_in":300})",
              {"Content-Type: application/json"});
  }};
  std::string realm() { return "http://" + server.authority() + "/token"; }
};

// A registry that takes one bearer token at a time (`valid`), challenging anything else.
struct BearerRegistry {
  explicit BearerRegistry(std::string realm_in) : realm(std::move(realm_in)) {}
  std::string realm;
  std::mutex mutex;
  std::string valid = "Bearer tok-1";
  std::string challenge_scope = "repository:team/py:pull";
  LoopbackServer server{[this](const Request& r, Conversation& c) {
    std::string expected;
    {
      std::lock_guard lock(mutex);
      expected = valid;
    }
    if (r.Header("authorization") != expected) {
      std::string challenge = "WWW-Authenticate: Bearer realm=\"" + realm + "\",service=\"test registry\"";
      if (!challenge_scope.empty()) challenge += ",scope=\"" + challenge_scope + "\"";
      c.Respond(401, ErrorBody("UNAUTHORIZED", "authentication required"), {challenge});
      return;
    }
    if (r.target.find("/blobs/") != std::string::npos) {
      c.Respond(200, "0123456789");
    } else {
      c.Respond(200, "{}", {"Content-Type: " + std::string(media_type::kOciManifest)});
    }
  }};
  void Accept(const std::string& token) {
    std::lock_guard lock(mutex);
    valid = "Bearer " + token;
  }
};

TEST(RegistryClientTest, TheTokenDanceFetchesATokenOnceAndUsesItUntilItIsRefused) {
  TokenServer tokens;
  BearerRegistry registry(tokens.realm());
  RegistryClient client(registry.server.authority(), kRepo, WithLogin(PlainOptions()));

  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(tokens.issued, 1);
  auto token_requests = tokens.server.requests();
  ASSERT_EQ(token_requests.size(), 1u);
  EXPECT_EQ(token_requests[0].target, "/token?service=test%20registry&scope=repository%3Ateam%2Fpy%3Apull");
  EXPECT_EQ(token_requests[0].Header("authorization"), kBasicAlice) << "the login goes to the token service";
  auto requests = registry.server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].Header("authorization"), "");
  EXPECT_EQ(requests[1].Header("authorization"), "Bearer tok-1");

  // The cached token goes out at once.
  Collected blob;
  ASSERT_TRUE(client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart).ok());
  EXPECT_EQ(blob.bytes, "0123456789");
  EXPECT_EQ(tokens.issued, 1);
  EXPECT_EQ(registry.server.count(), 3u);

  // Expired: one challenge, one new token, the request again.
  registry.Accept("tok-2");
  fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(tokens.issued, 2);
  requests = registry.server.requests();
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests[3].Header("authorization"), "Bearer tok-1");
  EXPECT_EQ(requests[4].Header("authorization"), "Bearer tok-2");
}

TEST(RegistryClientTest, AnAnonymousTokenDanceSendsNoLoginAndReadsAccessToken) {
  TokenServer tokens;
  tokens.field = "access_token";
  BearerRegistry registry(tokens.realm());
  RegistryClient client(registry.server.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  ASSERT_EQ(tokens.server.count(), 1u);
  EXPECT_EQ(tokens.server.requests()[0].Header("authorization"), "");
}

TEST(RegistryClientTest, AChallengeWithoutAScopeAsksForPullOrPullPushByTheRequest) {
  TokenServer tokens;
  BearerRegistry registry(tokens.realm());
  registry.challenge_scope = "";
  RegistryClient client(registry.server.authority(), kRepo, PlainOptions());
  ASSERT_TRUE(client.GetManifest("latest", 1 << 20).ok());
  ASSERT_EQ(tokens.server.count(), 1u);
  EXPECT_NE(tokens.server.requests()[0].target.find("scope=repository%3Ateam%2Fpy%3Apull"), std::string::npos)
      << tokens.server.requests()[0].target;

  registry.Accept("never");
  (void)client.PutManifest("v1", media_type::kOciManifest, "{}");
  ASSERT_EQ(tokens.server.count(), 2u);
  EXPECT_NE(tokens.server.requests()[1].target.find("scope=repository%3Ateam%2Fpy%3Apull%2Cpush"), std::string::npos)
      << tokens.server.requests()[1].target;
}

TEST(RegistryClientTest, ARefusedTokenIsUnauthorizedWithoutTheSecretsInTheMessage) {
  LoopbackServer tokens([&](const Request&, Conversation& c) {
    c.Respond(401, ErrorBody("DENIED", "bad login"), {"Content-Type: application/json"});
  });
  BearerRegistry registry("http://" + tokens.authority() + "/token");
  RegistryClient client(registry.server.authority(), kRepo, WithLogin(PlainOptions()));
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(fetched.error().detail_code, "registry_unauthorized");
  EXPECT_NE(fetched.error().message.find("bad login"), std::string::npos) << fetched.error().message;
  EXPECT_EQ(fetched.error().message.find("s3cret"), std::string::npos) << fetched.error().message;
  EXPECT_EQ(fetched.error().message.find(Base64Encode("alice:s3cret")), std::string::npos) << fetched.error().message;
}

TEST(RegistryClientTest, ATokenTheRegistryStillRefusesEndsAfterOneDanceWithoutTheToken) {
  TokenServer tokens;
  BearerRegistry registry(tokens.realm());
  registry.Accept("nothing-the-token-server-issues");
  RegistryClient client(registry.server.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(fetched.error().detail_code, "registry_unauthorized");
  EXPECT_NE(fetched.error().message.find("authentication required"), std::string::npos) << fetched.error().message;
  EXPECT_EQ(fetched.error().message.find("tok-1"), std::string::npos) << fetched.error().message;
  EXPECT_EQ(tokens.issued, 1);
  EXPECT_EQ(registry.server.count(), 2u);
}

TEST(RegistryClientTest, ATokenResponseWithoutATokenOrWithAHostileOneFails) {
  for (const std::string& body : {std::string(R"({"nothing":"here"})"), std::string("not json"),
                                 std::string(R"({"token":"a\r\nX-Injected: 1"})"), std::string(R"({"token":42})")}) {
    LoopbackServer tokens([&](const Request&, Conversation& c) { c.Respond(200, body); });
    BearerRegistry registry("http://" + tokens.authority() + "/token");
    RegistryClient client(registry.server.authority(), kRepo, PlainOptions());
    auto fetched = client.GetManifest("latest", 1 << 20);
    ASSERT_FALSE(fetched.ok()) << body;
    EXPECT_EQ(registry.server.count(), 1u) << body << ": nothing sent with a bad token";
  }
}

TEST(RegistryClientTest, BasicChallengesAreAnsweredWithTheLoginOrRefusedWithoutOne) {
  auto handler = [&](const Request& r, Conversation& c) {
    if (r.Header("authorization") != kBasicAlice) {
      c.Respond(401, ErrorBody("UNAUTHORIZED", "login please"), {"WWW-Authenticate: Basic realm=\"Registry\""});
      return;
    }
    c.Respond(200, "{}", {"Content-Type: " + std::string(media_type::kDockerManifest)});
  };
  LoopbackServer registry(handler);
  RegistryClient client(registry.authority(), kRepo, WithLogin(PlainOptions()));
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(fetched->media_type, media_type::kDockerManifest);
  ASSERT_EQ(registry.count(), 2u);
  // And from then on at once.
  ASSERT_TRUE(client.GetManifest("latest", 1 << 20).ok());
  EXPECT_EQ(registry.count(), 3u);

  RegistryClient anonymous(registry.authority(), kRepo, PlainOptions());
  fetched = anonymous.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(fetched.error().detail_code, "registry_unauthorized");
  EXPECT_EQ(registry.count(), 4u);

  RegistryClientOptions wrong = PlainOptions();
  wrong.credentials = RegistryCredentials{"alice", "wrong-password"};
  RegistryClient mistaken(registry.authority(), kRepo, wrong);
  fetched = mistaken.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnauthorized);
  EXPECT_NE(fetched.error().message.find("login please"), std::string::npos) << fetched.error().message;
  EXPECT_EQ(fetched.error().message.find("wrong-password"), std::string::npos) << fetched.error().message;
}

TEST(RegistryClientTest, AForbiddenRepositoryIsForbidden) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(403, ErrorBody("DENIED", "requested access to the resource is denied"));
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kForbidden);
  EXPECT_EQ(fetched.error().detail_code, "registry_denied");
  EXPECT_NE(fetched.error().message.find("requested access"), std::string::npos) << fetched.error().message;
}

// ---- Blobs

TEST(RegistryClientTest, FetchBlobStreamsContentLengthAndChunkedBodies) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.target.ends_with("/chunked")) {
      c.RespondChunked(200, {big.substr(0, 1000), big.substr(1000, 2 << 20), big.substr(1000 + (2 << 20))});
    } else {
      c.Respond(200, big);
    }
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected sized;
  ASSERT_TRUE(client.FetchBlob(kDigest, 0, big.size(), sized.sink, sized.restart).ok());
  EXPECT_TRUE(sized.bytes == big);
  EXPECT_EQ(registry.requests()[0].target, "/v2/team/py/blobs/" + kDigest);
  EXPECT_EQ(registry.requests()[0].Header("range"), "") << "from the start, no range";

  Collected chunked;
  ASSERT_TRUE(client.FetchBlob("chunked", 0, big.size(), chunked.sink, chunked.restart).ok());
  EXPECT_TRUE(chunked.bytes == big);
}

TEST(RegistryClientTest, FetchBlobResumesWithARangeAndTakesAWholeAnswerAsARestart) {
  std::atomic<bool> honour_range{true};
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (honour_range && r.Header("range") == "bytes=4-") {
      c.Respond(206, "456789", {"Content-Range: bytes 4-9/10"});
    } else {
      c.Respond(200, "0123456789");
    }
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected resumed;
  ASSERT_TRUE(client.FetchBlob(kDigest, 4, 10, resumed.sink, resumed.restart).ok());
  EXPECT_EQ(resumed.bytes, "456789");
  EXPECT_EQ(resumed.restarts, 0);
  EXPECT_EQ(registry.requests()[0].Header("range"), "bytes=4-");

  honour_range = false;
  Collected restarted;
  ASSERT_TRUE(client.FetchBlob(kDigest, 4, 10, restarted.sink, restarted.restart).ok());
  EXPECT_EQ(restarted.restarts, 1);
  EXPECT_EQ(restarted.bytes, "0123456789");
}

TEST(RegistryClientTest, ARangeAnsweredFromElsewhereIsRefused) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(206, "23456789", {"Content-Range: bytes 2-9/10"});
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 4, 10, blob.sink, blob.restart);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(blob.bytes, "");
}

TEST(RegistryClientTest, ADroppedBlobConnectionIsResumedFromWhereItStopped) {
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.Header("range").empty()) {
      c.Write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234");  // and the connection drops
    } else if (r.Header("range") == "bytes=5-") {
      c.Respond(206, "56789", {"Content-Range: bytes 5-9/10"});
    } else {
      c.Respond(416, "");
    }
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_EQ(blob.bytes, "0123456789");
  EXPECT_EQ(registry.count(), 2u);
}

TEST(RegistryClientTest, MoreBlobBytesThanExpectedAreRefusedAndNeverReachTheSink) {
  LoopbackServer by_length([&](const Request&, Conversation& c) { c.Respond(200, std::string(20, 'x')); });
  RegistryClient client(by_length.authority(), kRepo, PlainOptions());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(blob.bytes.size(), 0u) << "refused on its Content-Length before reading";

  LoopbackServer chunked([&](const Request&, Conversation& c) {
    c.RespondChunked(200, {std::string(6, 'x'), std::string(6, 'y'), std::string(6, 'z')});
  });
  RegistryClient client2(chunked.authority(), kRepo, PlainOptions());
  Collected blob2;
  status = client2.FetchBlob(kDigest, 0, 10, blob2.sink, blob2.restart);
  ASSERT_FALSE(status.ok());
  EXPECT_LE(blob2.bytes.size(), 10u);
}

TEST(RegistryClientTest, AMissingBlobIsNotFound) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Respond(404, ErrorBody("BLOB_UNKNOWN", "blob unknown to registry"));
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(status.error().detail_code, "blob_not_found");
  EXPECT_NE(status.error().message.find("blob unknown"), std::string::npos) << status.error().message;
}

TEST(RegistryClientTest, RedirectsAreFollowedWithoutTheRegistrysAuthorizationOnAnotherHost) {
  LoopbackServer storage([&](const Request& r, Conversation& c) {
    if (r.target != "/bucket/blob?X-Sig=a%2Fb") return c.Respond(404, "");
    c.Respond(200, "0123456789");
  });
  TokenServer tokens;
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.Header("authorization") != "Bearer tok-1") {
      c.Respond(401, "", {"WWW-Authenticate: Bearer realm=\"" + tokens.realm() + "\",service=\"s\""});
    } else if (r.target == "/v2/team/py/blobs/" + kDigest) {
      c.Respond(302, "", {"Location: moved/" + kDigest});  // relative, on the registry itself
    } else {
      c.Respond(307, "", {"Location: http://" + storage.authority() + "/bucket/blob?X-Sig=a%2Fb"});
    }
  });
  RegistryClient client(registry.authority(), kRepo, WithLogin(PlainOptions()));
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_EQ(blob.bytes, "0123456789");

  auto requests = registry.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[2].target, "/v2/team/py/blobs/moved/" + kDigest);
  EXPECT_EQ(requests[2].Header("authorization"), "Bearer tok-1") << "the registry's own host keeps the token";
  auto stored = storage.requests();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].Header("authorization"), "") << "another host (another port) never sees the token";
  EXPECT_EQ(stored[0].Header("host"), storage.authority());
}

TEST(RegistryClientTest, ARedirectLoopEndsAfterFiveHops) {
  LoopbackServer registry([&](const Request& r, Conversation& c) { c.Respond(302, "", {"Location: " + r.target + "x"}); });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, ErrorCode::kBadGateway);
  EXPECT_LE(registry.count(), 6u);
}

TEST(RegistryClientTest, ARedirectToANonHttpLocationIsRefused) {
  LoopbackServer registry([&](const Request&, Conversation& c) { c.Respond(302, "", {"Location: file:///etc/passwd"}); });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(blob.bytes, "");
}

// ---- Timeouts and cancelling

RegistryClientOptions Impatient() {
  RegistryClientOptions options = PlainOptions();
  options.connect_timeout = 300ms;
  options.idle_timeout = 300ms;
  return options;
}

TEST(RegistryClientTest, AServerThatNeverAnswersHitsTheIdleTimeout) {
  LoopbackServer registry([&](const Request&, Conversation& c) { c.Stall(); });
  RegistryClient client(registry.authority(), kRepo, Impatient());
  Result<FetchedManifest> fetched = MakeError(ErrorCode::kInternal, "not run");
  auto took = Timed([&] { fetched = client.GetManifest("latest", 1 << 20); });
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(fetched.error().detail_code, "registry_unreachable");
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 5s);
}

TEST(RegistryClientTest, ABlobThatStallsMidwayHitsTheIdleTimeout) {
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.Header("range").empty()) c.Write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234");
    c.Stall();
  });
  RegistryClient client(registry.authority(), kRepo, Impatient());
  Collected blob;
  Status status = MakeError(ErrorCode::kInternal, "not run");
  auto took = Timed([&] { status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart); });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(blob.bytes, "01234");
  EXPECT_LT(took, 5s);
}

TEST(RegistryClientTest, ASlowButSteadyBodyIsNoIdleTimeout) {
  // 30 pieces 60 ms apart: 1.8 s in all, never 300 ms without a byte.
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Write("HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n");
    for (int i = 0; i < 30; ++i) {
      if (!c.SleepUnlessStopping(60ms)) return;
      if (!c.Write(std::string(100, static_cast<char>('a' + i % 26)))) return;
    }
  });
  RegistryClient client(registry.authority(), kRepo, Impatient());
  Collected blob;
  Status status = client.FetchBlob(kDigest, 0, 3000, blob.sink, blob.restart);
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_EQ(blob.bytes.size(), 3000u);
  EXPECT_EQ(registry.count(), 1u) << "in one request, not resumed after timeouts";
}

// A listener whose backlog is full: connecting to it neither succeeds nor fails.
struct Unanswering {
  UniqueFd listener{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  UniqueFd filler{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  uint16_t port = 0;
  Unanswering() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener.get(), 0), 0);
    socklen_t length = sizeof(address);
    getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
    EXPECT_EQ(connect(filler.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  std::string authority() const { return "127.0.0.1:" + std::to_string(port); }
};

TEST(RegistryClientTest, AConnectionThatIsNeverAcceptedHitsTheConnectTimeout) {
  Unanswering registry;
  RegistryClient client(registry.authority(), kRepo, Impatient());
  Result<FetchedManifest> fetched = MakeError(ErrorCode::kInternal, "not run");
  auto took = Timed([&] { fetched = client.GetManifest("latest", 1 << 20); });
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_NE(fetched.error().message.find(registry.authority()), std::string::npos) << fetched.error().message;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 5s);
}

// Cancels `client` from another thread after `after`.
struct CancelLater {
  std::thread thread;
  CancelLater(RegistryClient& client, std::chrono::milliseconds after)
      : thread([&client, after] {
          std::this_thread::sleep_for(after);
          client.Cancel();
        }) {}
  ~CancelLater() { thread.join(); }
};

RegistryClientOptions Patient() {
  RegistryClientOptions options = PlainOptions();
  options.connect_timeout = 60s;
  options.idle_timeout = 60s;
  return options;
}

TEST(RegistryClientTest, CancelFromAnotherThreadEndsAStalledRequestPromptly) {
  LoopbackServer registry([&](const Request&, Conversation& c) {
    c.Write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n012");
    c.Stall();
  });
  RegistryClient client(registry.authority(), kRepo, Patient());
  Collected blob;
  Status status = MakeError(ErrorCode::kInternal, "not run");
  auto took = Timed([&] {
    CancelLater cancel(client, 300ms);
    status = client.FetchBlob(kDigest, 0, 10, blob.sink, blob.restart);
  });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, ErrorCode::kUnavailable);
  EXPECT_LT(took, 3s);
  EXPECT_EQ(registry.count(), 1u) << "a cancelled blob is not resumed";

  // And every later request ends at once, without a connection.
  auto fetched = client.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(registry.count(), 1u);
}

TEST(RegistryClientTest, CancelEndsARequestWaitingForAnAnswerOrAConnection) {
  LoopbackServer silent([&](const Request&, Conversation& c) { c.Stall(); });
  RegistryClient waiting(silent.authority(), kRepo, Patient());
  Result<FetchedManifest> fetched = MakeError(ErrorCode::kInternal, "not run");
  auto took = Timed([&] {
    CancelLater cancel(waiting, 300ms);
    fetched = waiting.GetManifest("latest", 1 << 20);
  });
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnavailable);
  EXPECT_LT(took, 3s);

  Unanswering unaccepted;
  RegistryClient connecting(unaccepted.authority(), kRepo, Patient());
  took = Timed([&] {
    CancelLater cancel(connecting, 300ms);
    fetched = connecting.GetManifest("latest", 1 << 20);
  });
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().code, ErrorCode::kUnavailable);
  EXPECT_LT(took, 3s);
}

// ---- TLS

// A CA and the certificates it signs, made in memory (P-256 keys: quick to make).
struct TestPki {
  SslPtr<EVP_PKEY> ca_key{EVP_EC_gen("P-256")};
  SslPtr<X509> ca{Make("bulkhead test CA", ca_key.get(), nullptr, nullptr, {"basicConstraints=critical,CA:TRUE",
                                                                            "keyUsage=critical,keyCertSign,cRLSign"})};
  std::string ca_file;

  TestPki() {
    char path[] = "/tmp/bulkhead-registry-ca-XXXXXX";
    const int fd = mkstemp(path);
    UniqueFd owned(fd);
    ca_file = path;
    SslPtr<BIO> bio(BIO_new(BIO_s_mem()));
    PEM_write_bio_X509(bio.get(), ca.get());
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio.get(), &data);
    EXPECT_EQ(write(fd, data, static_cast<size_t>(size)), size);
  }
  ~TestPki() { std::filesystem::remove(ca_file); }

  // A server context with a certificate for `subject_alt_name` ("IP:127.0.0.1") from this CA.
  SslPtr<SSL_CTX> ServerContext(const std::string& subject_alt_name) {
    SslPtr<EVP_PKEY> key(EVP_EC_gen("P-256"));
    SslPtr<X509> cert(Make("registry", key.get(), ca.get(), ca_key.get(),
                           {"basicConstraints=critical,CA:FALSE", "subjectAltName=" + subject_alt_name}));
    SslPtr<SSL_CTX> context(SSL_CTX_new(TLS_server_method()));
    EXPECT_EQ(SSL_CTX_use_certificate(context.get(), cert.get()), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey(context.get(), key.get()), 1);
    return context;
  }

  static X509* Make(const std::string& common_name, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key,
                    const std::vector<std::string>& extensions) {
    static std::atomic<long> serial{1};
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(issuer ? issuer : cert));
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer ? issuer : cert, cert, nullptr, nullptr, 0);
    for (const std::string& extension : extensions) {
      const size_t eq = extension.find('=');
      X509_EXTENSION* ext =
          X509V3_EXT_conf(nullptr, &context, extension.substr(0, eq).c_str(), extension.substr(eq + 1).c_str());
      EXPECT_NE(ext, nullptr) << extension;
      if (ext) X509_add_ext(cert, ext, -1);
      X509_EXTENSION_free(ext);
    }
    X509_sign(cert, issuer_key ? issuer_key : key, EVP_sha256());
    return cert;
  }
};

RegistryClientOptions TlsOptions(const std::string& ca_file) {
  RegistryClientOptions options;
  options.connect_timeout = 5s;
  options.idle_timeout = 5s;
  options.ca_file = ca_file;
  return options;
}

void RespondManifest(const Request&, Conversation& c) {
  c.Respond(200, "{}", {"Content-Type: " + std::string(media_type::kOciManifest)});
}

TEST(RegistryClientTest, TlsIsVerifiedAgainstTheGivenCaAndTheRegistrysAddress) {
  TestPki pki;
  auto context = pki.ServerContext("IP:127.0.0.1");
  LoopbackServer registry(RespondManifest, context.get());

  RegistryClient trusting(registry.authority(), kRepo, TlsOptions(pki.ca_file));
  auto fetched = trusting.GetManifest("latest", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(fetched->body, "{}");

  RegistryClient system_only(registry.authority(), kRepo, TlsOptions(""));
  fetched = system_only.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok()) << "a CA the system does not trust";
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(fetched.error().detail_code, "registry_unreachable");

  auto other_name = pki.ServerContext("DNS:registry.example");
  LoopbackServer impostor(RespondManifest, other_name.get());
  RegistryClient checking(impostor.authority(), kRepo, TlsOptions(pki.ca_file));
  fetched = checking.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok()) << "a certificate for another name";
  EXPECT_EQ(fetched.error().code, ErrorCode::kBadGateway);
  EXPECT_EQ(impostor.count(), 0u) << "no request sent over an unverified connection";
}

TEST(RegistryClientTest, AnHttpsRegistryTakesAPlainHttpTokenRealmOnlyOnLoopback) {
  TestPki pki;
  auto context = pki.ServerContext("IP:127.0.0.1");
  TokenServer tokens;
  std::string realm = tokens.realm();
  std::mutex mutex;
  LoopbackServer registry(
      [&](const Request& r, Conversation& c) {
        std::lock_guard lock(mutex);
        if (r.Header("authorization") == "Bearer tok-1") return RespondManifest(r, c);
        c.Respond(401, "", {"WWW-Authenticate: Bearer realm=\"" + realm + "\",service=\"s\""});
      },
      context.get());
  RegistryClient loopback(registry.authority(), kRepo, TlsOptions(pki.ca_file));
  auto fetched = loopback.GetManifest("latest", 1 << 20);
  ASSERT_TRUE(fetched.ok()) << fetched.error().message;
  EXPECT_EQ(tokens.server.count(), 1u);

  // 0.0.0.0 is no loopback address to the client (though Linux would connect it here).
  {
    std::lock_guard lock(mutex);
    realm = "http://0.0.0.0:" + std::to_string(tokens.server.port()) + "/token";
  }
  RegistryClient elsewhere(registry.authority(), kRepo, TlsOptions(pki.ca_file));
  fetched = elsewhere.GetManifest("latest", 1 << 20);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(tokens.server.count(), 1u) << "no token asked for over plain HTTP";
}

// ---- Push

TEST(RegistryClientTest, HasBlobAsksWithHead) {
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.target.ends_with(kDigest)) {
      c.Write("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nDocker-Content-Digest: " + kDigest + "\r\n\r\n");
    } else {
      c.Write("HTTP/1.1 404 Not Found\r\nContent-Length: 50\r\n\r\n");
    }
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  auto has = client.HasBlob(kDigest);
  ASSERT_TRUE(has.ok()) << has.error().message;
  EXPECT_TRUE(*has);
  has = client.HasBlob("sha256:" + std::string(64, 'b'));
  ASSERT_TRUE(has.ok()) << has.error().message;
  EXPECT_FALSE(*has);
  EXPECT_EQ(registry.requests()[0].method, "HEAD");
}

RegistryClient::Body BodyOf(const std::string& bytes) {
  RegistryClient::Body body;
  body.size = bytes.size();
  body.read = [&bytes](uint64_t offset, char* buffer, size_t capacity) -> Result<size_t> {
    const size_t n = std::min<size_t>(capacity, bytes.size() - offset);
    std::memcpy(buffer, bytes.data() + offset, n);
    return n;
  };
  return body;
}

TEST(RegistryClientTest, UploadBlobPostsThenPutsTheBytesToTheLocationWithTheDigest) {
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i % 251);
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.method == "POST") return c.Respond(202, "", {"Location: /v2/team/py/blobs/uploads/u-1?_state=abc"});
    c.Respond(201, "", {"Location: /v2/team/py/blobs/" + kDigest});
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  const RegistryClient::Body body = BodyOf(bytes);
  Status status = client.UploadBlob(kDigest, body);
  ASSERT_TRUE(status.ok()) << status.error().message;
  auto requests = registry.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].target, "/v2/team/py/blobs/uploads/");
  EXPECT_EQ(requests[1].method, "PUT");
  EXPECT_EQ(requests[1].target, "/v2/team/py/blobs/uploads/u-1?_state=abc&digest=sha256%3A" + std::string(64, 'a'));
  EXPECT_EQ(requests[1].Header("content-length"), std::to_string(bytes.size()));
  EXPECT_EQ(requests[1].Header("content-type"), "application/octet-stream");
  EXPECT_TRUE(requests[1].body == bytes);
}

TEST(RegistryClientTest, AnUploadLocationOnAnotherHostGetsTheBytesButNotTheLogin) {
  LoopbackServer uploads([&](const Request&, Conversation& c) { c.Respond(201, ""); });
  LoopbackServer registry([&](const Request& r, Conversation& c) {
    if (r.Header("authorization") != kBasicAlice) {
      return c.Respond(401, "", {"WWW-Authenticate: Basic realm=\"r\""});
    }
    c.Respond(202, "", {"Location: http://" + uploads.authority() + "/upload/u-2"});
  });
  RegistryClient client(registry.authority(), kRepo, WithLogin(PlainOptions()));
  const std::string bytes = "layer bytes";
  const RegistryClient::Body body = BodyOf(bytes);
  Status status = client.UploadBlob(kDigest, body);
  ASSERT_TRUE(status.ok()) << status.error().message;
  auto put = uploads.requests();
  ASSERT_EQ(put.size(), 1u);
  EXPECT_EQ(put[0].target, "/upload/u-2?digest=sha256%3A" + std::string(64, 'a'));
  EXPECT_EQ(put[0].Header("authorization"), "");
  EXPECT_EQ(put[0].body, bytes);
}

TEST(RegistryClientTest, PutManifestSendsItsTypeAndBodyAndReportsTheRegistrysRefusal) {
  std::atomic<bool> accept{true};
  LoopbackServer registry([&](const Request&, Conversation& c) {
    if (accept) return c.Respond(201, "", {"Docker-Content-Digest: " + kDigest});
    c.Respond(400, ErrorBody("MANIFEST_INVALID", "manifest invalid"));
  });
  RegistryClient client(registry.authority(), kRepo, PlainOptions());
  const std::string manifest = R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"})";
  Status status = client.PutManifest("v1", media_type::kOciManifest, manifest);
  ASSERT_TRUE(status.ok()) << status.error().message;
  auto requests = registry.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].target, "/v2/team/py/manifests/v1");
  EXPECT_EQ(requests[0].Header("content-type"), media_type::kOciManifest);
  EXPECT_EQ(requests[0].body, manifest);

  accept = false;
  status = client.PutManifest("v1", media_type::kOciManifest, manifest);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("manifest invalid"), std::string::npos) << status.error().message;
}

}  // namespace
}  // namespace bulkhead::storage
