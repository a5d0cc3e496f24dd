#include "common/tls_relay.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;
using Plain = asio::generic::stream_protocol::socket;
using Tls = ssl::stream<asio::ip::tcp::socket>;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

Error TlsError(const std::string& what, const error_code& ec) {
  return MakeError(ErrorCode::kInvalid, what + ": " + ec.message(), "tls_error");
}

// One connection's two sockets, shared by its two directions (and its handshake's deadline):
// the last to end closes them.
struct Relay {
  std::shared_ptr<ssl::context> context;  // outlives the stream made from it (a reload may drop it)
  Tls tls;
  Plain plain;
  bool handshaken = false;
  Relay(std::shared_ptr<ssl::context> c, Plain p, asio::ip::tcp::socket socket)
      : context(std::move(c)), tls(std::move(socket), *context), plain(std::move(p)) {}
};

// Copies what `from` reads to `to` until `from` ends or either side fails.
template <typename From, typename To>
asio::awaitable<void> Pump(From& from, To& to) {
  std::array<char, 16384> buffer;
  for (;;) {
    error_code ec;
    const size_t n = co_await from.async_read_some(asio::buffer(buffer), Redirect(ec));
    if (n > 0) co_await asio::async_write(to, asio::buffer(buffer.data(), n), Redirect(ec));
    if (ec) co_return;
  }
}

// TLS to plain: what the peer sends. Its end (close_notify or the connection gone) ends the
// plain side's reading too.
asio::awaitable<void> TlsToPlain(std::shared_ptr<Relay> relay) {
  co_await Pump(relay->tls, relay->plain);
  error_code ignored;
  relay->plain.shutdown(asio::socket_base::shutdown_send, ignored);
}

// Plain to TLS: what the server (or the client) answers. Its end closes the TLS session.
asio::awaitable<void> PlainToTls(std::shared_ptr<Relay> relay) {
  co_await Pump(relay->plain, relay->tls);
  // close_notify, then the connection goes: a peer that never answers it holds nothing long.
  asio::steady_timer limit(relay->tls.get_executor(), std::chrono::seconds(2));
  limit.async_wait([relay](const error_code& waited) {
    error_code ignored;
    if (!waited) relay->tls.lowest_layer().close(ignored);
  });
  error_code ec;
  co_await relay->tls.async_shutdown(Redirect(ec));
  limit.cancel();
  relay->tls.lowest_layer().shutdown(asio::socket_base::shutdown_both, ec);
  relay->tls.lowest_layer().close(ec);
}

// The threads of WrapBlocking's relays, and how many still run.
struct BlockingRelays {
  std::mutex mu;
  std::condition_variable ended;
  std::vector<std::thread> threads;
  size_t running = 0;
};
BlockingRelays& Relays() {
  static BlockingRelays* relays = new BlockingRelays;  // never destroyed: threads may outlive exit
  return *relays;
}

// What identifies a file's version for Reload(changed_only): its size and modification time.
using FileStamp = std::pair<off_t, struct timespec>;
std::optional<FileStamp> StampOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileStamp{st.st_size, st.st_mtim};
}
bool Same(const std::optional<FileStamp>& a, const std::optional<FileStamp>& b) {
  return a && b && a->first == b->first && a->second.tv_sec == b->second.tv_sec &&
         a->second.tv_nsec == b->second.tv_nsec;
}

// A server's context from its certificate chain and key (PEM files).
Result<std::shared_ptr<ssl::context>> ServerContext(const std::string& cert_path, const std::string& key_path) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  for (const std::string& path : {cert_path, key_path})
    if (access(path.c_str(), R_OK) != 0) return SystemError("TLS: cannot read " + path, errno);
  error_code ec;
  context->use_certificate_chain_file(cert_path, ec);
  if (ec) return TlsError("TLS certificate " + cert_path + " (a PEM certificate chain)", ec);
  context->use_private_key_file(key_path, ssl::context::pem, ec);
  if (ec && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) ec = {};
  if (ec) return TlsError("TLS key " + key_path + " (a PEM private key)", ec);
  if (SSL_CTX_check_private_key(context->native_handle()) != 1)
    return MakeError(ErrorCode::kInvalid, "TLS key " + key_path + " is not the key of certificate " + cert_path,
                     "tls_error");
  return context;
}

}  // namespace

struct TlsEndpoint::Impl {
  bool server = false;
  std::string cert_path, key_path;  // a server's
  std::mutex mu;                    // guards what follows (Reload swaps them)
  std::shared_ptr<ssl::context> context;
  std::optional<FileStamp> cert_stamp, key_stamp;  // of the files `context` was loaded from

  std::shared_ptr<ssl::context> Context() {
    std::lock_guard lock(mu);
    return context;
  }
};

TlsEndpoint::TlsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsEndpoint::~TlsEndpoint() = default;

Result<std::shared_ptr<TlsEndpoint>> TlsEndpoint::Server(const std::string& cert_path, const std::string& key_path) {
  auto impl = std::make_unique<Impl>();
  impl->server = true;
  impl->cert_path = cert_path;
  impl->key_path = key_path;
  auto endpoint = std::shared_ptr<TlsEndpoint>(new TlsEndpoint(std::move(impl)));
  auto loaded = endpoint->Reload(false);
  if (!loaded) return loaded.error();
  return endpoint;
}

Result<bool> TlsEndpoint::Reload(bool changed_only) {
  if (!impl_->server) return MakeError(ErrorCode::kInternal, "only a server's TLS settings are reloaded");
  // The stamps are taken before the files are read: a write between the two is seen next time.
  const auto cert_stamp = StampOf(impl_->cert_path), key_stamp = StampOf(impl_->key_path);
  if (changed_only) {
    std::lock_guard lock(impl_->mu);
    if (Same(cert_stamp, impl_->cert_stamp) && Same(key_stamp, impl_->key_stamp)) return false;
  }
  auto context = ServerContext(impl_->cert_path, impl_->key_path);
  std::lock_guard lock(impl_->mu);
  // A failed load is not tried again until a file changes once more.
  impl_->cert_stamp = cert_stamp;
  impl_->key_stamp = key_stamp;
  if (!context) return context.error();
  impl_->context = std::move(*context);
  return true;
}

Result<std::shared_ptr<TlsEndpoint>> TlsEndpoint::Client(const std::string& ca_path) {
  auto impl = std::make_unique<Impl>();
  impl->context = std::make_shared<ssl::context>(ssl::context::tls_client);
  ssl::context& context = *impl->context;
  context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  error_code ec;
  if (ca_path.empty())
    context.set_default_verify_paths(ec);
  else
    context.load_verify_file(ca_path, ec);
  if (ec) return TlsError("TLS authorities " + (ca_path.empty() ? std::string("of the system") : ca_path), ec);
  context.set_verify_mode(ssl::verify_peer);
  return std::shared_ptr<TlsEndpoint>(new TlsEndpoint(std::move(impl)));
}

asio::awaitable<Result<UniqueFd>> TlsEndpoint::Wrap(asio::any_io_executor executor, UniqueFd tcp,
                                                    std::string server_name, std::chrono::milliseconds timeout) {
  auto strand = asio::make_strand(executor);
  asio::ip::tcp::socket socket(strand);
  error_code ec;
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&local), &length);
  socket.assign(local.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), tcp.get(), ec);
  if (ec) co_return TlsError("TLS socket", ec);
  tcp.release();
  auto relay = std::make_shared<Relay>(impl_->Context(), Plain(strand), std::move(socket));
  Tls& tls = relay->tls;
  if (!impl_->server) {
    // The name for SNI and the name the certificate must carry.
    SSL_set_tlsext_host_name(tls.native_handle(), server_name.c_str());
    tls.set_verify_callback(ssl::host_name_verification(server_name));
  }
  // A peer that never finishes its handshake is cut off.
  asio::steady_timer deadline(strand, timeout);
  deadline.async_wait([weak = std::weak_ptr<Relay>(relay)](const error_code& waited) {
    auto held = weak.lock();
    if (waited || !held || held->handshaken) return;
    error_code ignored;
    held->tls.lowest_layer().close(ignored);
  });
  co_await tls.async_handshake(impl_->server ? ssl::stream_base::server : ssl::stream_base::client, Redirect(ec));
  relay->handshaken = true;
  deadline.cancel();
  if (ec) co_return TlsError("TLS handshake", ec);

  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0)
    co_return SystemError("socketpair", errno);
  UniqueFd ours(pair[0]), theirs(pair[1]);
  relay->plain.assign(asio::generic::stream_protocol(AF_UNIX, 0), ours.get(), ec);
  if (ec) co_return TlsError("TLS relay socket", ec);
  ours.release();
  asio::co_spawn(strand, TlsToPlain(relay), asio::detached);
  asio::co_spawn(strand, PlainToTls(relay), asio::detached);
  co_return theirs;
}

Result<UniqueFd> TlsEndpoint::WrapBlocking(UniqueFd tcp, const std::string& server_name,
                                           std::chrono::milliseconds timeout) {
  std::promise<Result<UniqueFd>> answer;
  std::future<Result<UniqueFd>> answered = answer.get_future();
  // The thread lives as long as the relay: its io_context runs out of work when both ends close.
  BlockingRelays& relays = Relays();
  std::unique_lock lock(relays.mu);
  ++relays.running;
  relays.threads.emplace_back([self = shared_from_this(), fd = tcp.release(), server_name, timeout,
                               answer = std::move(answer)]() mutable {
    {
      asio::io_context io;
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            answer.set_value(co_await self->Wrap(io.get_executor(), UniqueFd(fd), server_name, timeout));
          },
          asio::detached);
      io.run();
      self.reset();
    }
    BlockingRelays& relays = Relays();
    std::lock_guard lock(relays.mu);
    --relays.running;
    relays.ended.notify_all();
  });
  lock.unlock();
  return answered.get();
}

void TlsEndpoint::FinishBlockingRelays(std::chrono::milliseconds limit) {
  BlockingRelays& relays = Relays();
  std::vector<std::thread> threads;
  {
    std::unique_lock lock(relays.mu);
    if (!relays.ended.wait_for(lock, limit, [&] { return relays.running == 0; })) return;  // left to the exit
    threads.swap(relays.threads);
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace bulkhead
