#include <gtest/gtest.h>

#include "client/server_url.h"

namespace bulkhead::cli {
namespace {

TEST(CliServerUrl, ParsesUnixSocketForms) {
  auto absolute = ParseServerUrl("unix:///var/lib/bulkhead/bulkhead.sock");
  ASSERT_TRUE(absolute.ok());
  EXPECT_EQ(absolute->kind, ServerAddress::Kind::kUnix);
  EXPECT_EQ(absolute->socket_path, "/var/lib/bulkhead/bulkhead.sock");
  EXPECT_EQ(absolute->HostHeader(), "localhost");
  EXPECT_EQ(absolute->ToUrl(), "unix:///var/lib/bulkhead/bulkhead.sock");

  auto relative = ParseServerUrl("unix:state/bulkhead.sock");
  ASSERT_TRUE(relative.ok());
  EXPECT_EQ(relative->socket_path, "state/bulkhead.sock");

  auto bare = ParseServerUrl("/run/b.sock");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->kind, ServerAddress::Kind::kUnix);
  EXPECT_EQ(bare->socket_path, "/run/b.sock");
}

TEST(CliServerUrl, ParsesTcpForms) {
  auto full = ParseServerUrl("http://127.0.0.1:7420");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->kind, ServerAddress::Kind::kTcp);
  EXPECT_EQ(full->host, "127.0.0.1");
  EXPECT_EQ(full->port, 7420);
  EXPECT_EQ(full->HostHeader(), "127.0.0.1:7420");

  auto default_port = ParseServerUrl("http://localhost/");
  ASSERT_TRUE(default_port.ok());
  EXPECT_EQ(default_port->host, "localhost");
  EXPECT_EQ(default_port->port, 80);
  EXPECT_EQ(default_port->HostHeader(), "localhost");

  auto v6 = ParseServerUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9000);
  EXPECT_EQ(v6->HostHeader(), "[::1]:9000");

  auto tls = ParseServerUrl("https://bulkhead.example.com");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->port, 443);
  EXPECT_EQ(tls->HostHeader(), "bulkhead.example.com");
  EXPECT_EQ(tls->ToUrl(), "https://bulkhead.example.com:443");
  EXPECT_FALSE(full->tls);

  auto no_scheme = ParseServerUrl("127.0.0.1:7421");
  ASSERT_TRUE(no_scheme.ok());
  EXPECT_EQ(no_scheme->host, "127.0.0.1");
  EXPECT_EQ(no_scheme->port, 7421);
}

TEST(CliServerUrl, RejectsWhatItCannotReach) {
  for (const char* url : {"", "https://", "ftp://x", "http://host:0", "http://host:70000",
                          "http://host:7420/v1", "http://:7420", "http://host:", "http://[::1", "::1:7420",
                          "unix://", "http://host:12ab"}) {
    auto parsed = ParseServerUrl(url);
    EXPECT_FALSE(parsed.ok()) << url;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.error().detail_code, "invalid_url") << url;
    }
  }
}

TEST(CliServerUrl, DefaultIsTheSocketInTheStateDir) {
  EXPECT_EQ(DefaultServerAddress("/var/lib/bulkhead").socket_path, "/var/lib/bulkhead/bulkhead.sock");
  EXPECT_EQ(DefaultServerAddress("/tmp/state/").socket_path, "/tmp/state/bulkhead.sock");
}

}  // namespace
}  // namespace bulkhead::cli
