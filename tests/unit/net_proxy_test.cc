// The egress proxy end to end over loopback, without a network namespace: the test hands it
// listeners on 127.0.0.1 ephemeral ports as if ConfigureNetns had made them (so every proxy
// connection is an explicit one: transparent redirection needs a namespace and is covered by
// the integration tests), a small upstream DNS server answering a fixed zone and recording
// what it was asked, and a loopback HTTP server as the destination.
#include "net/egress_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "net/address_names.h"
#include "net/dns_message.h"
#include "net/proxy_connection.h"
#include "net/upstream_dns.h"

namespace bulkhead::net {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = 10s;  // how long a test waits for something that should happen at once

// ---- Plain blocking sockets for the test's side.

uint16_t PortOf(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

UniqueFd BoundSocket(int type) {
  UniqueFd fd(socket(AF_INET, type | SOCK_CLOEXEC, 0));
  const sockaddr_in address = Loopback(0);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  if (type == SOCK_STREAM) {
    EXPECT_EQ(listen(fd.get(), 64), 0);
  }
  return fd;
}

void SetReceiveTimeout(int fd) {
  timeval timeout{};
  timeout.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(kWait).count();
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
}

UniqueFd Connect(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in address = Loopback(port);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) return UniqueFd();
  SetReceiveTimeout(fd.get());
  return fd;
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << strerror(errno);
    data.remove_prefix(size_t(n));
  }
}

// Reads until `marker` has arrived (answers everything read) or the peer ends.
std::string ReadUntil(int fd, std::string_view marker) {
  std::string data;
  char chunk[4096];
  while (data.find(marker) == std::string::npos) {
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    data.append(chunk, size_t(n));
  }
  return data;
}

// Reads an HTTP response with a Content-Length body.
std::string ReadResponse(int fd) {
  std::string data = ReadUntil(fd, "\r\n\r\n");
  const size_t head_end = data.find("\r\n\r\n");
  if (head_end == std::string::npos) return data;
  const size_t at = data.find("Content-Length: ");
  if (at == std::string::npos || at > head_end) return data;
  const size_t length = std::stoul(data.substr(at + 16));
  char chunk[4096];
  while (data.size() < head_end + 4 + length) {
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    data.append(chunk, size_t(n));
  }
  return data;
}

// True once the peer closed or reset the connection (what it sent before is skipped).
bool PeerClosed(int fd) {
  char chunk[4096];
  for (;;) {
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

template <typename Predicate>
bool WaitUntil(Predicate predicate) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// ---- The log the proxy writes.

class RecordingSink : public EgressSink {
 public:
  struct Finished {
    int64_t bytes_out = 0, bytes_in = 0;
    std::string reason;
  };

  int64_t Begin(const EgressRecord& record) override {
    std::lock_guard lock(mutex_);
    records_.push_back(record);
    records_.back().id = int64_t(records_.size());
    return records_.back().id;
  }
  void Finish(int64_t id, int64_t bytes_out, int64_t bytes_in, int64_t, const std::string& reason) override {
    std::lock_guard lock(mutex_);
    finished_[id] = Finished{bytes_out, bytes_in, reason};
  }

  std::vector<EgressRecord> Records() {
    std::lock_guard lock(mutex_);
    return records_;
  }
  std::optional<Finished> FinishedOf(int64_t id) {
    std::lock_guard lock(mutex_);
    auto it = finished_.find(id);
    if (it == finished_.end()) return std::nullopt;
    return it->second;
  }
  // The first record of `protocol` naming `name` (or any, for "").
  std::optional<EgressRecord> Find(const std::string& protocol, const std::string& name) {
    for (const auto& record : Records()) {
      if (record.protocol == protocol && (name.empty() || record.name == name)) return record;
    }
    return std::nullopt;
  }

 private:
  std::mutex mutex_;
  std::vector<EgressRecord> records_;
  std::map<int64_t, Finished> finished_;
};

// ---- The upstream DNS server: A records for a fixed zone, NXDOMAIN for the rest.

class FakeDnsServer {
 public:
  struct Asked {
    std::string name;
    uint16_t type;
  };

  explicit FakeDnsServer(std::map<std::string, std::string> zone)
      : zone_(std::move(zone)), socket_(BoundSocket(SOCK_DGRAM)), port_(PortOf(socket_.get())) {
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDnsServer() {
    stop_ = true;
    thread_.join();
  }
  uint16_t port() const { return port_; }
  std::vector<Asked> Asked() {
    std::lock_guard lock(mutex_);
    return asked_;
  }

 private:
  void Serve() {
    char buffer[4096];
    while (!stop_) {
      pollfd poll_fd{socket_.get(), POLLIN, 0};
      if (poll(&poll_fd, 1, 20) <= 0) continue;
      sockaddr_in peer{};
      socklen_t peer_length = sizeof(peer);
      const ssize_t n = recvfrom(socket_.get(), buffer, sizeof(buffer), 0, reinterpret_cast<sockaddr*>(&peer), &peer_length);
      if (n <= 0) continue;
      const std::string query(buffer, size_t(n));
      const auto question = dns::ParseQuery(query);
      if (!question) continue;
      {
        std::lock_guard lock(mutex_);
        asked_.push_back({question->name, question->type});
      }
      const std::string reply = Reply(query, *question);
      sendto(socket_.get(), reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&peer), peer_length);
    }
  }

  // The query's header and question (the test's queries carry nothing else), then the answer.
  std::string Reply(const std::string& query, const dns::Question& question) {
    std::string name = question.name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    auto it = zone_.find(name);
    std::string reply = query;
    reply[2] = static_cast<char>(0x80 | (query[2] & 0x01));  // QR, RD as asked
    reply[3] = static_cast<char>(0x80 | (it == zone_.end() ? dns::kRcodeNxDomain : dns::kRcodeNoError));
    if (it == zone_.end() || question.type != dns::kTypeA) return reply;
    reply[7] = 1;  // ANCOUNT
    in_addr address{};
    inet_pton(AF_INET, it->second.c_str(), &address);
    reply += std::string("\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04", 12);  // name ptr, A, IN, TTL 300, 4 bytes
    reply.append(reinterpret_cast<const char*>(&address), 4);
    return reply;
  }

  const std::map<std::string, std::string> zone_;
  UniqueFd socket_;
  const uint16_t port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::vector<struct Asked> asked_;
};

// ---- The destination: answers each request head with "hello from <Host>"; anything that is
// not HTTP is only counted.

class HttpServer {
 public:
  struct Connection {
    std::string received;
    bool ended = false;
  };

  HttpServer() : listener_(BoundSocket(SOCK_STREAM)), port_(PortOf(listener_.get())) {
    thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~HttpServer() {
    shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& thread : connection_threads_) thread.join();
  }
  uint16_t port() const { return port_; }
  std::vector<Connection> Connections() {
    std::lock_guard lock(mutex_);
    return connections_;
  }

 private:
  void AcceptLoop() {
    for (;;) {
      const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard lock(mutex_);
      connections_.emplace_back();
      open_fds_.push_back(fd);
      connection_threads_.emplace_back([this, fd, index = connections_.size() - 1] { Serve(UniqueFd(fd), index); });
    }
  }

  void Serve(UniqueFd fd, size_t index) {
    std::string pending;
    char chunk[4096];
    for (;;) {
      const ssize_t n = recv(fd.get(), chunk, sizeof(chunk), 0);
      if (n <= 0) break;
      pending.append(chunk, size_t(n));
      {
        std::lock_guard lock(mutex_);
        connections_[index].received.append(chunk, size_t(n));
      }
      size_t head_end;
      while (pending.starts_with("GET ") && (head_end = pending.find("\r\n\r\n")) != std::string::npos) {
        const std::string head = pending.substr(0, head_end);
        pending.erase(0, head_end + 4);
        const size_t host_at = head.find("\r\nHost: ");
        const std::string host =
            host_at == std::string::npos ? "" : head.substr(host_at + 8, head.find("\r\n", host_at + 8) - host_at - 8);
        const std::string body = "hello from " + host;
        SendAll(fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
      }
    }
    std::lock_guard lock(mutex_);
    connections_[index].ended = true;
    std::erase(open_fds_, fd.get());
  }

  UniqueFd listener_;
  const uint16_t port_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<Connection> connections_;
  std::vector<int> open_fds_;
  std::vector<std::thread> connection_threads_;
};

// A TLS ClientHello naming `server_name`.
std::string ClientHello(const std::string& server_name) {
  auto put16 = [](std::string& out, size_t value) {
    out.push_back(static_cast<char>(value >> 8));
    out.push_back(static_cast<char>(value & 0xff));
  };
  std::string names;
  names.push_back('\0');  // host_name
  put16(names, server_name.size());
  names += server_name;
  std::string server_name_extension;
  put16(server_name_extension, names.size());
  server_name_extension += names;
  std::string extensions;
  put16(extensions, 0);  // server_name
  put16(extensions, server_name_extension.size());
  extensions += server_name_extension;

  std::string hello("\x03\x03", 2);  // TLS 1.2
  hello += std::string(32, 'r');      // random
  hello.push_back('\0');              // no session id
  put16(hello, 2);
  hello += std::string("\x13\x01", 2);  // one cipher suite
  hello += std::string("\x01\x00", 2);  // compression: null
  put16(hello, extensions.size());
  hello += extensions;

  std::string handshake("\x01", 1);  // ClientHello
  handshake.push_back('\0');
  put16(handshake, hello.size());
  handshake += hello;
  std::string record("\x16\x03\x01", 3);
  put16(record, handshake.size());
  return record + handshake;
}

Policy Allow(const std::vector<std::string>& entries) {
  auto policy = ParsePolicy("allowlist", entries);
  EXPECT_TRUE(policy.ok()) << (policy.ok() ? "" : policy.error().message);
  return policy.ok() ? *policy : Policy{};
}

// ---- The fixture: a proxy serving sandbox "sb" on test-made listeners.

class EgressProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EgressProxyOptions options;
    options.dns_servers = {"127.0.0.1:" + std::to_string(dns_.port())};
    options.connect_timeout = 5s;
    auto proxy = EgressProxy::Start(options, sink_);
    ASSERT_TRUE(proxy.ok()) << proxy.error().message;
    proxy_ = std::move(*proxy);
  }
  void TearDown() override { proxy_.reset(); }

  void Attach(const Policy& policy) {
    NetnsListeners listeners;
    listeners.tcp4 = BoundSocket(SOCK_STREAM);
    listeners.dns_udp4 = BoundSocket(SOCK_DGRAM);
    listeners.dns_tcp4 = BoundSocket(SOCK_STREAM);
    proxy_port_ = PortOf(listeners.tcp4.get());
    dns_udp_port_ = PortOf(listeners.dns_udp4.get());
    dns_tcp_port_ = PortOf(listeners.dns_tcp4.get());
    proxy_->Attach("sb", std::move(listeners), policy);
  }

  std::string HttpAddress() const { return "127.0.0.1:" + std::to_string(http_.port()); }

  // A CONNECT tunnel through the proxy to `target`, after its 200.
  UniqueFd Tunnel(const std::string& target) {
    UniqueFd client = Connect(proxy_port_);
    EXPECT_TRUE(client.valid());
    SendAll(client.get(), "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
    const std::string head = ReadUntil(client.get(), "\r\n\r\n");
    EXPECT_EQ(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    return client;
  }

  // One UDP query to the sandbox resolver; its reply.
  std::string AskUdp(const std::string& query) {
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    SetReceiveTimeout(fd.get());
    const sockaddr_in address = Loopback(dns_udp_port_);
    sendto(fd.get(), query.data(), query.size(), 0, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
    char buffer[4096];
    const ssize_t n = recv(fd.get(), buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, size_t(n)) : std::string();
  }

  RecordingSink sink_;
  FakeDnsServer dns_{{{"a.test", "127.0.0.1"}, {"b.test", "127.0.0.1"}}};
  HttpServer http_;
  std::unique_ptr<EgressProxy> proxy_;
  uint16_t proxy_port_ = 0, dns_udp_port_ = 0, dns_tcp_port_ = 0;
};

TEST_F(EgressProxyTest, ConnectToAllowedAddressRelaysBothWaysAndLogsTheByteCounts) {
  Attach(Allow({HttpAddress()}));
  UniqueFd client = Tunnel(HttpAddress());
  const std::string request = "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  SendAll(client.get(), request);
  const std::string response = ReadResponse(client.get());
  EXPECT_TRUE(response.ends_with("\r\n\r\nhello from 127.0.0.1")) << response;
  client.reset();

  auto record = sink_.Find("tcp", "");
  ASSERT_TRUE(record);
  EXPECT_TRUE(record->allowed);
  EXPECT_EQ(record->sandbox_id, "sb");
  EXPECT_EQ(record->address, "127.0.0.1");
  EXPECT_EQ(record->port, http_.port());
  ASSERT_TRUE(WaitUntil([&] { return sink_.FinishedOf(record->id).has_value(); }));
  EXPECT_EQ(sink_.FinishedOf(record->id)->bytes_out, int64_t(request.size()));
  EXPECT_EQ(sink_.FinishedOf(record->id)->bytes_in, int64_t(response.size()));
  EXPECT_EQ(sink_.FinishedOf(record->id)->reason, "");
  ASSERT_EQ(http_.Connections().size(), 1u);
  EXPECT_EQ(http_.Connections()[0].received, request);
}

TEST_F(EgressProxyTest, OpenListsALiveConnectionWithItsByteCounts) {
  Attach(Allow({HttpAddress()}));
  EXPECT_TRUE(proxy_->Open("sb").empty());
  UniqueFd client = Tunnel(HttpAddress());
  const std::string request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  SendAll(client.get(), request);
  const std::string response = ReadResponse(client.get());
  ASSERT_TRUE(response.ends_with("hello from 127.0.0.1")) << response;

  std::vector<EgressRecord> open;
  ASSERT_TRUE(WaitUntil([&] {
    open = proxy_->Open("sb");
    return open.size() == 1 && open[0].bytes_in == int64_t(response.size());
  }));
  EXPECT_TRUE(open[0].open);
  EXPECT_TRUE(open[0].allowed);
  EXPECT_EQ(open[0].id, sink_.Find("tcp", "")->id);
  EXPECT_EQ(open[0].address, "127.0.0.1");
  EXPECT_EQ(open[0].bytes_out, int64_t(request.size()));
  EXPECT_TRUE(proxy_->Open("other").empty());

  client.reset();
  EXPECT_TRUE(WaitUntil([&] { return proxy_->Open("sb").empty(); }));
}

TEST_F(EgressProxyTest, ConnectToADeniedNameIs403AndReachesNoServer) {
  Attach(Allow({HttpAddress(), "a.test"}));
  UniqueFd client = Connect(proxy_port_);
  SendAll(client.get(), "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n");
  const std::string response = ReadResponse(client.get());
  EXPECT_TRUE(response.starts_with("HTTP/1.1 403 Forbidden\r\n")) << response;
  EXPECT_TRUE(response.ends_with("\r\n\r\nbulkhead: egress to other.test:443 denied: other.test:443 is not in the "
                                 "allowlist\n"))
      << response;

  auto record = sink_.Find("tcp", "other.test");
  ASSERT_TRUE(record);
  EXPECT_FALSE(record->allowed);
  EXPECT_EQ(record->port, 443);
  EXPECT_TRUE(dns_.Asked().empty());
  EXPECT_TRUE(http_.Connections().empty());
}

TEST_F(EgressProxyTest, ConnectToAnAllowedNameGoesWhereTheProxyResolvedIt) {
  Attach(Allow({"a.test", HttpAddress()}));
  UniqueFd client = Tunnel("a.test:" + std::to_string(http_.port()));
  SendAll(client.get(), "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
  EXPECT_TRUE(ReadResponse(client.get()).ends_with("hello from a.test"));
  auto record = sink_.Find("tcp", "a.test");
  ASSERT_TRUE(record);
  EXPECT_TRUE(record->allowed);
  EXPECT_EQ(record->address, "127.0.0.1");
  const auto asked = dns_.Asked();
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked[0].name, "a.test");
}

TEST_F(EgressProxyTest, SniThatIsNotTheConnectHostIsCut) {
  Attach(Allow({"a.test", "b.test", HttpAddress()}));
  const std::string port = std::to_string(http_.port());

  // The ClientHello names the CONNECT host: relayed as it is.
  UniqueFd matching = Tunnel("a.test:" + port);
  const std::string hello = ClientHello("a.test");
  SendAll(matching.get(), hello);
  ASSERT_TRUE(WaitUntil([&] { return http_.Connections().size() == 1 && http_.Connections()[0].received == hello; }));

  // It names another (allowed) name: domain fronting. Cut before a byte goes upstream.
  UniqueFd fronting = Tunnel("a.test:" + port);
  SendAll(fronting.get(), ClientHello("b.test"));
  EXPECT_TRUE(PeerClosed(fronting.get()));
  std::optional<EgressRecord> denied;
  for (const auto& record : sink_.Records()) {
    if (!record.allowed) denied = record;
  }
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->name, "a.test");
  EXPECT_EQ(denied->reason, "SNI does not match CONNECT host");
  ASSERT_TRUE(WaitUntil([&] { return http_.Connections().size() == 2 && http_.Connections()[1].ended; }));
  EXPECT_EQ(http_.Connections()[1].received, "");
}

TEST_F(EgressProxyTest, AbsoluteFormIsForwardedInOriginFormAndAHostMismatchIs403) {
  Attach(Allow({HttpAddress(), "a.test"}));
  const std::string uri = "http://" + HttpAddress() + "/path?q=1";

  UniqueFd client = Connect(proxy_port_);
  SendAll(client.get(), "GET " + uri + " HTTP/1.1\r\nHost: " + HttpAddress() +
                            "\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nAccept: */*\r\n\r\n");
  const std::string response = ReadResponse(client.get());
  EXPECT_TRUE(response.ends_with("hello from " + HttpAddress())) << response;
  ASSERT_EQ(http_.Connections().size(), 1u);
  EXPECT_EQ(http_.Connections()[0].received,
            "GET /path?q=1 HTTP/1.1\r\nHost: " + HttpAddress() + "\r\nAccept: */*\r\nConnection: close\r\n\r\n");

  UniqueFd mismatch = Connect(proxy_port_);
  SendAll(mismatch.get(), "GET " + uri + " HTTP/1.1\r\nHost: a.test\r\n\r\n");
  const std::string refused = ReadResponse(mismatch.get());
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 403 Forbidden\r\n")) << refused;
  EXPECT_NE(refused.find("Host header does not match the request URI"), std::string::npos) << refused;
  EXPECT_EQ(http_.Connections().size(), 1u);
}

TEST_F(EgressProxyTest, OriginFormRequestsToTheProxyItselfAre400) {
  Attach(Allow({HttpAddress()}));
  UniqueFd client = Connect(proxy_port_);
  SendAll(client.get(), "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_TRUE(ReadResponse(client.get()).starts_with("HTTP/1.1 400 Bad Request\r\n"));
  UniqueFd garbage = Connect(proxy_port_);
  SendAll(garbage.get(), "\x16\x03\x01 not http at all\r\n\r\n");
  EXPECT_TRUE(ReadResponse(garbage.get()).starts_with("HTTP/1.1 400 Bad Request\r\n"));
}

TEST_F(EgressProxyTest, ResolverAnswersAllowedNamesAndNeverForwardsOthers) {
  Attach(Allow({"a.test"}));
  const std::string reply = AskUdp(dns::BuildQuery(0x1234, "A.test", dns::kTypeA));
  auto answer = dns::ParseAnswer(reply);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->id, 0x1234);
  EXPECT_EQ(answer->rcode, dns::kRcodeNoError);
  ASSERT_EQ(answer->addresses.size(), 1u);
  EXPECT_EQ(answer->addresses[0].address.ToString(), "127.0.0.1");

  const std::string refused = AskUdp(dns::BuildQuery(0x4321, "c2VjcmV0.evil.test", dns::kTypeTxt));
  auto nx = dns::ParseAnswer(refused);
  ASSERT_TRUE(nx);
  EXPECT_EQ(nx->id, 0x4321);
  EXPECT_EQ(nx->rcode, dns::kRcodeNxDomain);

  const auto asked = dns_.Asked();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].name, "A.test");
  EXPECT_EQ(asked[0].type, dns::kTypeA);

  auto allowed = sink_.Find("dns", "a.test");
  ASSERT_TRUE(allowed);
  EXPECT_TRUE(allowed->allowed);
  EXPECT_EQ(allowed->query_type, "A");
  auto denied = sink_.Find("dns", "c2vjcmv0.evil.test");
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->allowed);
  EXPECT_EQ(denied->query_type, "TXT");
  EXPECT_EQ(denied->reason, "c2vjcmv0.evil.test is not in the allowlist");
}

TEST_F(EgressProxyTest, ResolverAnswersOverTcp) {
  Attach(Allow({"a.test"}));
  UniqueFd client = Connect(dns_tcp_port_);
  ASSERT_TRUE(client.valid());
  for (const auto& [id, name] : {std::pair{uint16_t(7), "a.test"}, std::pair{uint16_t(8), "nope.test"}}) {
    const std::string query = dns::BuildQuery(id, name, dns::kTypeA);
    SendAll(client.get(), std::string{char(query.size() >> 8), char(query.size() & 0xff)} + query);
    unsigned char length[2];
    ASSERT_EQ(recv(client.get(), length, 2, MSG_WAITALL), 2);
    std::string reply(size_t(length[0]) << 8 | length[1], '\0');
    ASSERT_EQ(recv(client.get(), reply.data(), reply.size(), MSG_WAITALL), ssize_t(reply.size()));
    auto answer = dns::ParseAnswer(reply);
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->id, id);
    EXPECT_EQ(answer->rcode, id == 7 ? dns::kRcodeNoError : dns::kRcodeNxDomain);
  }
  EXPECT_EQ(dns_.Asked().size(), 1u);
}

TEST_F(EgressProxyTest, SetPolicyCutsTheRelaysItNoLongerAllows) {
  Attach(Allow({HttpAddress()}));
  UniqueFd client = Tunnel(HttpAddress());
  const std::string request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  SendAll(client.get(), request);
  ASSERT_TRUE(ReadResponse(client.get()).ends_with("hello from 127.0.0.1"));

  // A policy that still allows it leaves it alone.
  proxy_->SetPolicy("sb", Allow({HttpAddress(), "a.test"}));
  SendAll(client.get(), request);
  ASSERT_TRUE(ReadResponse(client.get()).ends_with("hello from 127.0.0.1"));

  proxy_->SetPolicy("sb", Allow({"a.test"}));
  EXPECT_TRUE(PeerClosed(client.get()));
  auto record = sink_.Find("tcp", "");
  ASSERT_TRUE(record);
  ASSERT_TRUE(WaitUntil([&] { return sink_.FinishedOf(record->id).has_value(); }));
  EXPECT_EQ(sink_.FinishedOf(record->id)->reason, "policy changed");

  // New connections follow the new policy.
  UniqueFd again = Connect(proxy_port_);
  SendAll(again.get(), "CONNECT " + HttpAddress() + " HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(ReadResponse(again.get()).starts_with("HTTP/1.1 403 Forbidden\r\n"));
}

TEST_F(EgressProxyTest, DetachClosesTheConnectionsAndTheListeners) {
  Attach(Allow({HttpAddress()}));
  UniqueFd client = Tunnel(HttpAddress());
  SendAll(client.get(), "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  ASSERT_TRUE(ReadResponse(client.get()).ends_with("hello from 127.0.0.1"));

  proxy_->Detach("sb");
  EXPECT_TRUE(PeerClosed(client.get()));
  const auto id = sink_.Find("tcp", "")->id;
  ASSERT_TRUE(WaitUntil([&] { return sink_.FinishedOf(id).has_value(); }));
  EXPECT_EQ(sink_.FinishedOf(id)->reason, "sandbox network detached");
  EXPECT_TRUE(WaitUntil([&] { return !Connect(proxy_port_).valid(); }));
  EXPECT_TRUE(WaitUntil([&] { return !Connect(dns_tcp_port_).valid(); }));
  EXPECT_TRUE(proxy_->Open("sb").empty());
  proxy_->Detach("sb");  // again, and for ids never attached: nothing happens
  proxy_->Detach("never");
}

// ---- Pure pieces.

TEST(ProxyAuthorityTest, ParsesNamesAddressesAndPorts) {
  auto name = ParseAuthority("A.Test:443", std::nullopt);
  ASSERT_TRUE(name);
  EXPECT_EQ(name->name, "a.test");
  EXPECT_EQ(name->port, 443);
  auto v6 = ParseAuthority("[2001:db8::1]:8443", std::nullopt);
  ASSERT_TRUE(v6 && v6->address);
  EXPECT_EQ(v6->HostPort(), "[2001:db8::1]:8443");
  auto defaulted = ParseAuthority("10.0.0.5", 80);
  ASSERT_TRUE(defaulted && defaulted->address);
  EXPECT_EQ(defaulted->HostPort(), "10.0.0.5:80");
  EXPECT_FALSE(ParseAuthority("a.test", std::nullopt));  // CONNECT needs a port
  EXPECT_FALSE(ParseAuthority("a.test:0", std::nullopt));
  EXPECT_FALSE(ParseAuthority("a.test:65536", std::nullopt));
  EXPECT_FALSE(ParseAuthority("2001:db8::1:443", std::nullopt));
  EXPECT_FALSE(ParseAuthority("[1.2.3.4]:443", std::nullopt));
  EXPECT_FALSE(ParseAuthority("bad name:443", std::nullopt));
  EXPECT_FALSE(ParseAuthority(":443", std::nullopt));
}

TEST(AddressNamesTest, RemembersNamesForAtLeastAMinuteAndAtMostAnHour) {
  AddressNames names;
  const auto now = AddressNames::Clock::now();
  const IpAddress address = *IpAddress::Parse("198.18.0.10");
  names.Remember("a.test", address, 5, now);
  names.Remember("b.test", address, 86400, now);
  EXPECT_EQ(names.Lookup(address, now + 59s), (std::vector<std::string>{"a.test", "b.test"}));
  EXPECT_EQ(names.Lookup(address, now + 61s), (std::vector<std::string>{"b.test"}));
  EXPECT_TRUE(names.Lookup(address, now + 3601s).empty());
  EXPECT_TRUE(names.Lookup(*IpAddress::Parse("198.18.0.11"), now).empty());
}

TEST(AddressNamesTest, StaysBounded) {
  AddressNames names;
  const auto now = AddressNames::Clock::now();
  for (uint32_t i = 0; i < AddressNames::kMaxEntries + 10; ++i) {
    IpAddress address;
    address.bytes = {10, uint8_t(i >> 16), uint8_t(i >> 8), uint8_t(i)};
    names.Remember("n.test", address, 60 + i, now);
  }
  IpAddress first;
  first.bytes = {10, 0, 0, 0};
  EXPECT_TRUE(names.Lookup(first, now).empty());  // the soonest to expire made room
  IpAddress last;
  const uint32_t i = AddressNames::kMaxEntries + 9;
  last.bytes = {10, uint8_t(i >> 16), uint8_t(i >> 8), uint8_t(i)};
  EXPECT_EQ(names.Lookup(last, now).size(), 1u);
}

TEST(UpstreamDnsTest, ParsesServersAndResolvConf) {
  auto v4 = ParseDnsServer("198.18.0.53");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->ToString(), "198.18.0.53:53");
  auto v6 = ParseDnsServer("[2001:db8::53]:5353");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->ToString(), "[2001:db8::53]:5353");
  EXPECT_EQ(ParseDnsServer("2001:db8::53")->port, 53);
  EXPECT_FALSE(ParseDnsServer("dns.example"));
  EXPECT_FALSE(ParseDnsServer("1.2.3.4:0"));
  EXPECT_FALSE(UpstreamServers({"1.2.3.4", "nope"}).ok());

  const auto servers = ResolvConfServers("# comment\nsearch x\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\n"
                                         "nameserver ::1\noptions edns0\n");
  ASSERT_EQ(servers.size(), 2u);
  EXPECT_EQ(servers[0].ToString(), "127.0.0.53:53");
  EXPECT_EQ(servers[1].ToString(), "[::1]:53");
}

}  // namespace
}  // namespace bulkhead::net
