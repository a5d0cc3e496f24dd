// ConfigureNetns on real, fresh network namespaces (as root): the redirects, the drops, the
// listeners, and switching modes back and forth. The namespaces have only lo, so no packet
// can leave them: the "remote" addresses (198.18.0.99, 2001:db8::1) are never reached.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "common/guest_link.h"
#include "common/unique_fd.h"
#include "net/netns.h"
#include "net/nftables.h"
#include "net/open_link.h"

namespace bulkhead::net {
namespace {

constexpr int kSoOriginalDst = 80;  // SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST (SOL_IPV6)
constexpr int kWaitMs = 5000;       // an upper bound for things that happen at once on loopback

// A new network namespace, held by the returned fd (it goes away when the fd and every
// socket in it are closed).
UniqueFd NewNetns() {
  int fd = -1;
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) == 0) fd = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  }).join();
  return UniqueFd(fd);
}

// Runs fn on a thread inside the namespace (for sockets SocketInNetns cannot make: raw ones).
void InNetns(int netns, const std::function<void()>& fn) {
  std::thread([&] {
    ASSERT_EQ(::setns(netns, CLONE_NEWNET), 0) << std::strerror(errno);
    fn();
  }).join();
}

sockaddr_storage Address(const char* ip, uint16_t port, socklen_t* length) {
  sockaddr_storage storage{};
  if (std::strchr(ip, ':') != nullptr) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    EXPECT_EQ(::inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    *length = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    EXPECT_EQ(::inet_pton(AF_INET, ip, &a->sin_addr), 1);
    *length = sizeof(sockaddr_in);
  }
  return storage;
}

std::string Text(const sockaddr_storage& storage) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(a->sin_port));
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
  ::inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
  return "[" + std::string(ip) + "]:" + std::to_string(ntohs(a->sin6_port));
}

// A TCP connection from inside the namespace; the socket once connected, or the errno.
struct Connection {
  UniqueFd fd;
  int error = 0;
};
Connection ConnectFrom(int netns, const char* ip, uint16_t port) {
  int family = std::strchr(ip, ':') != nullptr ? AF_INET6 : AF_INET;
  auto socket = SocketInNetns(netns, family, SOCK_STREAM);
  EXPECT_TRUE(socket.ok()) << socket.error().message;
  if (!socket.ok()) return {UniqueFd(), -1};
  socklen_t length;
  sockaddr_storage address = Address(ip, port, &length);
  if (::connect(socket->get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    if (errno != EINPROGRESS) return {UniqueFd(), errno};
    pollfd p{socket->get(), POLLOUT, 0};
    if (::poll(&p, 1, kWaitMs) != 1) return {UniqueFd(), ETIMEDOUT};
    int error = 0;
    socklen_t size = sizeof(error);
    ::getsockopt(socket->get(), SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) return {UniqueFd(), error};
  }
  return {std::move(*socket), 0};
}

// A datagram sent from inside the namespace: 0 or the errno of sendto.
int SendUdpFrom(int netns, const char* ip, uint16_t port, const std::string& payload) {
  int family = std::strchr(ip, ':') != nullptr ? AF_INET6 : AF_INET;
  auto socket = SocketInNetns(netns, family, SOCK_DGRAM);
  EXPECT_TRUE(socket.ok()) << socket.error().message;
  if (!socket.ok()) return -1;
  socklen_t length;
  sockaddr_storage address = Address(ip, port, &length);
  if (::sendto(socket->get(), payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&address), length) < 0) {
    return errno;
  }
  return 0;
}

// The next connection on a listener (waiting for it), or an invalid fd.
UniqueFd Accept(int listener) {
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, kWaitMs) != 1) return UniqueFd();
  return UniqueFd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
}

// True if a listening or datagram socket has something waiting right now.
bool HasPending(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

std::string LocalAddress(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length), 0);
  return Text(storage);
}

std::string OriginalDestination(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  int level = LocalAddress(fd).front() == '[' ? SOL_IPV6 : SOL_IP;
  if (::getsockopt(fd, level, kSoOriginalDst, &storage, &length) != 0) return std::string("error: ") + std::strerror(errno);
  return Text(storage);
}

bool NonBlockingAndCloseOnExec(int fd) {
  return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0 && (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    netns_ = NewNetns();
    ASSERT_TRUE(netns_.valid()) << "cannot make a network namespace (run as root)";
  }

  NetnsListeners Configure(Mode mode) {
    auto listeners = ConfigureNetns(netns_.get(), mode);
    EXPECT_TRUE(listeners.ok()) << listeners.error().message;
    return listeners.ok() ? std::move(*listeners) : NetnsListeners{};
  }

  // A TCP connection to ip:port arrives on `listener`, which reports ip:port as its original
  // destination.
  void ExpectRedirected(const char* ip, uint16_t port, int listener, const std::string& original) {
    Connection client = ConnectFrom(netns_.get(), ip, port);
    ASSERT_EQ(client.error, 0) << ip << ":" << port << ": " << std::strerror(client.error);
    UniqueFd accepted = Accept(listener);
    ASSERT_TRUE(accepted.valid()) << ip << ":" << port << " did not arrive";
    EXPECT_EQ(OriginalDestination(accepted.get()), original);
  }

  UniqueFd netns_;
};

TEST_F(NetnsTest, AllowlistGivesNonBlockingListenersOnLoopback) {
  NetnsListeners listeners = Configure(Mode::kAllowlist);
  // A fresh namespace has ::1 once lo is up, so all six exist here.
  struct {
    const UniqueFd& fd;
    const char* address;
  } expected[] = {{listeners.tcp4, "127.0.0.1:1000"},   {listeners.tcp6, "[::1]:1000"},
                  {listeners.dns_udp4, "127.0.0.1:53"}, {listeners.dns_udp6, "[::1]:53"},
                  {listeners.dns_tcp4, "127.0.0.1:53"}, {listeners.dns_tcp6, "[::1]:53"}};
  for (const auto& e : expected) {
    ASSERT_TRUE(e.fd.valid()) << e.address;
    EXPECT_EQ(LocalAddress(e.fd.get()), e.address);
    EXPECT_TRUE(NonBlockingAndCloseOnExec(e.fd.get())) << e.address;
  }
}

TEST_F(NetnsTest, AllowlistRedirectsTcpToTheProxyListenerWithTheOriginalDestination) {
  NetnsListeners listeners = Configure(Mode::kAllowlist);
  ExpectRedirected("198.18.0.99", 443, listeners.tcp4.get(), "198.18.0.99:443");
  ExpectRedirected("198.18.0.99", 80, listeners.tcp4.get(), "198.18.0.99:80");
  ExpectRedirected("2001:db8::1", 80, listeners.tcp6.get(), "[2001:db8::1]:80");
}

TEST_F(NetnsTest, ExplicitProxyClientSeesItsOwnAddressAsOriginalDestination) {
  NetnsListeners listeners = Configure(Mode::kAllowlist);
  ExpectRedirected("127.0.0.1", kProxyPort, listeners.tcp4.get(), "127.0.0.1:1000");
  ExpectRedirected("::1", kProxyPort, listeners.tcp6.get(), "[::1]:1000");
}

TEST_F(NetnsTest, AllowlistSendsDnsToTheDnsListeners) {
  NetnsListeners listeners = Configure(Mode::kAllowlist);
  ASSERT_EQ(SendUdpFrom(netns_.get(), "198.18.0.99", 53, "query4"), 0);
  char buffer[64];
  pollfd p{listeners.dns_udp4.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, kWaitMs), 1);
  ASSERT_EQ(::recv(listeners.dns_udp4.get(), buffer, sizeof(buffer), 0), 6);
  EXPECT_EQ(std::string(buffer, 6), "query4");

  ASSERT_EQ(SendUdpFrom(netns_.get(), "2001:db8::1", 53, "query6"), 0);
  p = {listeners.dns_udp6.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, kWaitMs), 1);
  ASSERT_EQ(::recv(listeners.dns_udp6.get(), buffer, sizeof(buffer), 0), 6);
  EXPECT_EQ(std::string(buffer, 6), "query6");

  ExpectRedirected("198.18.0.99", 53, listeners.dns_tcp4.get(), "198.18.0.99:53");
  ExpectRedirected("2001:db8::1", 53, listeners.dns_tcp6.get(), "[2001:db8::1]:53");
  EXPECT_FALSE(HasPending(listeners.tcp4.get()));  // DNS over TCP is not the proxy's
}

TEST_F(NetnsTest, AllowlistDropsOtherUdpAndIcmp) {
  NetnsListeners listeners = Configure(Mode::kAllowlist);
  EXPECT_EQ(SendUdpFrom(netns_.get(), "198.18.0.99", 9999, "x"), EPERM);
  EXPECT_EQ(SendUdpFrom(netns_.get(), "198.18.0.99", 443, "quic"), EPERM);
  EXPECT_EQ(SendUdpFrom(netns_.get(), "2001:db8::1", 9999, "x"), EPERM);
  InNetns(netns_.get(), [] {
    // Raw sockets: the test runs as root; a sandbox's root could not even make one.
    UniqueFd icmp(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
    ASSERT_TRUE(icmp.valid()) << std::strerror(errno);
    icmphdr echo{};
    echo.type = ICMP_ECHO;
    echo.checksum = htons(static_cast<uint16_t>(~(ICMP_ECHO << 8)));
    socklen_t length;
    sockaddr_storage to = Address("198.18.0.99", 0, &length);
    EXPECT_EQ(::sendto(icmp.get(), &echo, sizeof(echo), 0, reinterpret_cast<sockaddr*>(&to), length), -1);
    EXPECT_EQ(errno, EPERM);

    UniqueFd icmp6(::socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6));
    ASSERT_TRUE(icmp6.valid()) << std::strerror(errno);
    unsigned char echo6[8] = {128, 0, 0, 0, 0, 0, 0, 0};  // echo request; the kernel sums it
    to = Address("2001:db8::1", 0, &length);
    EXPECT_EQ(::sendto(icmp6.get(), echo6, sizeof(echo6), 0, reinterpret_cast<sockaddr*>(&to), length), -1);
    EXPECT_EQ(errno, EPERM);
  });
  // Loopback itself stays open: a sandbox's own servers work.
  auto server = SocketInNetns(netns_.get(), AF_INET, SOCK_DGRAM);
  ASSERT_TRUE(server.ok()) << server.error().message;
  socklen_t length;
  sockaddr_storage local = Address("127.0.0.1", 9999, &length);
  ASSERT_EQ(::bind(server->get(), reinterpret_cast<sockaddr*>(&local), length), 0);
  EXPECT_EQ(SendUdpFrom(netns_.get(), "127.0.0.1", 9999, "x"), 0);
  EXPECT_FALSE(HasPending(listeners.dns_udp4.get()));
}

TEST_F(NetnsTest, NoneRemovesRoutesAndRedirects) {
  NetnsListeners old = Configure(Mode::kAllowlist);
  NetnsListeners none = Configure(Mode::kNone);
  EXPECT_FALSE(none.tcp4.valid());
  EXPECT_FALSE(none.dns_udp4.valid());

  EXPECT_EQ(ConnectFrom(netns_.get(), "198.18.0.99", 443).error, ENETUNREACH);
  EXPECT_EQ(ConnectFrom(netns_.get(), "2001:db8::1", 80).error, ENETUNREACH);
  EXPECT_EQ(SendUdpFrom(netns_.get(), "198.18.0.99", 53, "q"), ENETUNREACH);
  EXPECT_EQ(SendUdpFrom(netns_.get(), "2001:db8::1", 53, "q"), ENETUNREACH);
  // Those failed synchronously, so nothing can still be on its way to the old listeners.
  EXPECT_FALSE(HasPending(old.tcp4.get()));
  EXPECT_FALSE(HasPending(old.tcp6.get()));
  EXPECT_FALSE(HasPending(old.dns_udp4.get()));
  EXPECT_FALSE(HasPending(old.dns_udp6.get()));

  // none again is fine (no route, no table to delete).
  Configure(Mode::kNone);
  EXPECT_EQ(ConnectFrom(netns_.get(), "198.18.0.99", 443).error, ENETUNREACH);
}

TEST_F(NetnsTest, NoneOnAFreshNamespaceIsFine) {
  Configure(Mode::kNone);
  EXPECT_EQ(ConnectFrom(netns_.get(), "198.18.0.99", 443).error, ENETUNREACH);
}

TEST_F(NetnsTest, AllowlistAgainAfterNoneWorks) {
  {
    NetnsListeners first = Configure(Mode::kAllowlist);
  }  // the caller closes the old listeners
  Configure(Mode::kNone);
  NetnsListeners again = Configure(Mode::kAllowlist);
  ExpectRedirected("198.18.0.99", 443, again.tcp4.get(), "198.18.0.99:443");
  ExpectRedirected("2001:db8::1", 443, again.tcp6.get(), "[2001:db8::1]:443");
  EXPECT_EQ(SendUdpFrom(netns_.get(), "198.18.0.99", 9999, "x"), EPERM);
}

TEST_F(NetnsTest, ReconfiguringWhileTheOldListenersAreOpenHandsOverToTheNewOnes) {
  NetnsListeners first = Configure(Mode::kAllowlist);
  // A connection accepted on the old listener outlives the re-configuration.
  Connection before = ConnectFrom(netns_.get(), "198.18.0.99", 443);
  ASSERT_EQ(before.error, 0);
  UniqueFd accepted_before = Accept(first.tcp4.get());
  ASSERT_TRUE(accepted_before.valid());

  NetnsListeners second = Configure(Mode::kOpen);
  ASSERT_TRUE(second.tcp4.valid());
  first = NetnsListeners{};  // the caller closes the old ones once it has the new ones

  ExpectRedirected("198.18.0.99", 443, second.tcp4.get(), "198.18.0.99:443");
  ExpectRedirected("2001:db8::1", 443, second.tcp6.get(), "[2001:db8::1]:443");
  ASSERT_EQ(SendUdpFrom(netns_.get(), "198.18.0.99", 53, "q"), 0);
  pollfd p{second.dns_udp4.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, kWaitMs), 1);

  ASSERT_EQ(::send(before.fd.get(), "still here", 10, 0), 10);
  char buffer[16];
  p = {accepted_before.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, kWaitMs), 1);
  EXPECT_EQ(::recv(accepted_before.get(), buffer, sizeof(buffer), 0), 10);
}

TEST_F(NetnsTest, ReconfiguringAfterADaemonRestartBindsDespiteTimeWait) {
  {
    NetnsListeners old = Configure(Mode::kAllowlist);
    Connection client = ConnectFrom(netns_.get(), "198.18.0.99", 443);
    ASSERT_EQ(client.error, 0);
    UniqueFd accepted = Accept(old.tcp4.get());
    ASSERT_TRUE(accepted.valid());
    accepted.reset();  // the daemon's side closes first: its end stays in TIME_WAIT
    char byte;
    pollfd p{client.fd.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, kWaitMs), 1);
    ASSERT_EQ(::recv(client.fd.get(), &byte, 1, 0), 0);
  }  // the old daemon's listeners die with it
  NetnsListeners fresh = Configure(Mode::kAllowlist);
  ASSERT_TRUE(fresh.tcp4.valid());
  ExpectRedirected("198.18.0.99", 443, fresh.tcp4.get(), "198.18.0.99:443");
}

// A guest link (common/guest_link.h): a tap made in the namespace, held open as QEMU would.
UniqueFd MakeTap(int netns) {
  int fd = -1;
  InNetns(netns, [&] {
    fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, guest_link::kTapName);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    if (fd >= 0 && ::ioctl(fd, TUNSETIFF, &ifr) != 0) {
      ::close(fd);
      fd = -1;
    }
  });
  return UniqueFd(fd);
}

// What `command` prints inside the namespace.
std::string OutputInNetns(int netns, const std::string& command) {
  std::string out;
  InNetns(netns, [&] {
    FILE* pipe = ::popen(command.c_str(), "r");
    char buffer[4096];
    for (size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
    if (pipe) ::pclose(pipe);
  });
  return out;
}

TEST_F(NetnsTest, AGuestLinkGetsTheGatewayForwardingAndTheGuestRulesAndLosesThemInModeNone) {
  auto without = NetnsHasGuestLink(netns_.get());
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(*without);
  UniqueFd tap = MakeTap(netns_.get());
  ASSERT_TRUE(tap.valid()) << std::strerror(errno);
  auto with = NetnsHasGuestLink(netns_.get());
  ASSERT_TRUE(with.ok());
  EXPECT_TRUE(*with);

  NetnsListeners listeners = Configure(Mode::kOpen);
  // The listeners take the gateway's addresses too (where nat_in sends the guest).
  EXPECT_EQ(LocalAddress(listeners.tcp4.get()), "0.0.0.0:1000");
  EXPECT_EQ(LocalAddress(listeners.dns_udp4.get()), "0.0.0.0:53");
  EXPECT_EQ(LocalAddress(listeners.tcp6.get()), "[::]:1000");
  EXPECT_EQ(LocalAddress(listeners.dns_tcp6.get()), "[::]:53");
  const std::string link = OutputInNetns(netns_.get(), "ip -o addr show dev tap0; ip -o link show dev tap0; "
                                                       "cat /proc/sys/net/ipv4/ip_forward; ip rule");
  EXPECT_NE(link.find("inet 10.0.2.2/24"), std::string::npos) << link;
  // IPv6: the gateway's unique local address, usable at once (no duplicate address detection,
  // so never "tentative" as the link-local one is for a while).
  EXPECT_NE(link.find("inet6 fd00:0:0:2::2/64 scope global nodad \\"), std::string::npos) << link;
  EXPECT_NE(link.find(",UP"), std::string::npos) << link;
  EXPECT_NE(link.find("\n1\n"), std::string::npos) << link;
  EXPECT_NE(link.find("90:\tfrom all to 10.0.2.0/24 lookup main"), std::string::npos) << link;
  const std::string rules = OutputInNetns(netns_.get(), "nft list table inet bulkhead");
  for (const char* want : {"iifname \"tap0\" meta l4proto tcp redirect to :1000", "chain forward",
                           "oifname \"eth0\" ip saddr 10.0.2.15 masquerade", "iifname \"tap0\" drop",
                           "iifname \"tap0\" icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept"})
    EXPECT_NE(rules.find(want), std::string::npos) << want << "\n" << rules;

  Configure(Mode::kNone);
  const std::string down = OutputInNetns(netns_.get(), "ip -o link show dev tap0; cat /proc/sys/net/ipv4/ip_forward; "
                                                       "nft list tables");
  EXPECT_EQ(down.find(",UP"), std::string::npos) << down;
  EXPECT_NE(down.find("\n0\n"), std::string::npos) << down;
  EXPECT_EQ(down.find("bulkhead"), std::string::npos) << down;
}

TEST(DenyRulesTest, DropsWhatIpv4AddressEntriesNameAndIgnoresTheRest) {
  auto policy = ParsePolicy("open", {}, {"198.18.0.12", "a.test", "198.18.0.0/24:9999", "2001:db8::/32", "::ffff:198.18.1.1"});
  ASSERT_TRUE(policy.ok()) << policy.error().message;
  EXPECT_EQ(DenyRules(*policy),
            "flush chain inet bulkhead deny_out\n"
            "add rule inet bulkhead deny_out ip daddr 198.18.0.12/32 drop\n"
            "add rule inet bulkhead deny_out ip daddr 198.18.0.0/24 udp dport 9999 drop\n"
            "add rule inet bulkhead deny_out ip daddr 198.18.1.1/32 drop\n");
}

TEST_F(NetnsTest, SetDenyEntriesReplacesTheChainsRules) {
  NetnsListeners listeners = Configure(Mode::kOpen);
  auto chain = [this] {
    std::string out;
    auto status = RunInNetns(netns_.get(), [&]() -> Status {
      auto listed = RunNft("list chain inet bulkhead deny_out", "test namespace");
      if (!listed.ok()) return listed.error();
      out = *listed;
      return {};
    });
    EXPECT_TRUE(status.ok()) << status.error().message;
    return out;
  };
  auto first = ParsePolicy("open", {}, {"198.18.0.12", "198.18.0.0/24:9999"});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(SetDenyEntries(netns_.get(), *first).ok());
  std::string listed = chain();
  EXPECT_NE(listed.find("ip daddr 198.18.0.12 drop"), std::string::npos) << listed;
  EXPECT_NE(listed.find("ip daddr 198.18.0.0/24 udp dport 9999 drop"), std::string::npos) << listed;
  auto second = ParsePolicy("open", {}, {"198.18.0.11"});
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(SetDenyEntries(netns_.get(), *second).ok());
  listed = chain();
  EXPECT_NE(listed.find("ip daddr 198.18.0.11 drop"), std::string::npos) << listed;
  EXPECT_EQ(listed.find("198.18.0.12"), std::string::npos) << listed;
  EXPECT_EQ(listed.find("9999"), std::string::npos) << listed;
}

TEST(NetnsErrorTest, NotANetworkNamespaceIsACleanError) {
  int closed = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(closed, 0);
  ::close(closed);
  auto result = ConfigureNetns(closed, Mode::kAllowlist);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::kInternal);
  EXPECT_NE(result.error().message.find("network namespace"), std::string::npos) << result.error().message;

  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  result = ConfigureNetns(read_end.get(), Mode::kAllowlist);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("Invalid argument"), std::string::npos) << result.error().message;

  UniqueFd mount_namespace(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(mount_namespace.valid());
  result = ConfigureNetns(mount_namespace.get(), Mode::kNone);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("Invalid argument"), std::string::npos) << result.error().message;

  EXPECT_FALSE(ConfigureNetns(-1, Mode::kNone).ok());
}

TEST(OpenLinksTest, TheSubnetMustBeAnIpv4PrefixWithRoomForLinks) {
  for (const char* text : {"2001:db8::/64", "10.0.0.0/29", "10.0.0.0/32", "0.0.0.0/0", "10.0.0.0/7"}) {
    auto links = OpenLinks::Start(*IpPrefix::Parse(text), "test");
    ASSERT_FALSE(links.ok()) << text;
    EXPECT_EQ(links.error().code, ErrorCode::kInvalid) << text;
    EXPECT_NE(links.error().message.find("length 8 to 28"), std::string::npos) << links.error().message;
  }
}

// The host's own namespace is never configured as a sandbox's (its default route and every TCP
// connection would go): whatever asks, with whatever descriptor of it.
TEST(Netns, RefusesTheHostsOwnNamespace) {
  UniqueFd own(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(own);
  for (Mode mode : {Mode::kNone, Mode::kAllowlist, Mode::kOpen}) {
    auto configured = ConfigureNetns(own.get(), mode);
    ASSERT_FALSE(configured.ok());
    EXPECT_NE(configured.error().message.find("host's own network namespace"), std::string::npos);
  }
  EXPECT_FALSE(ConfigurePodNetns(own.get()).ok());
  EXPECT_FALSE(SocketInNetns(own.get(), AF_INET, SOCK_STREAM).ok());
}

}  // namespace
}  // namespace bulkhead::net
