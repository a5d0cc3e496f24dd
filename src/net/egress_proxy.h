// The egress proxy and DNS resolver of every sandbox whose network mode is allowlist or open.
// Runs on its own io threads, apart from the API's, so a sandbox's traffic never delays the API.
//
// For each attached sandbox it serves the listeners ConfigureNetns made in its namespace:
//  * TCP redirected by the namespace's rules (transparent): the original destination comes
//    from SO_ORIGINAL_DST; the name from the first bytes (TLS SNI or HTTP Host, sniffed
//    without forwarding anything), or else from the names this sandbox's DNS lookups were
//    answered with for that address. A destination already allowed without a name (address
//    rule, or an address our resolver gave for an allowed name) is connected at once and its
//    first bytes are still checked as they pass; otherwise the proxy waits up to 2 s for a name.
//    With an allowed name it connects to what IT resolves the name to, never to the address
//    the sandbox picked. Denied: the sandbox's connection is reset.
//  * TCP made to the listener itself (explicit proxy; HTTP_PROXY/HTTPS_PROXY/ALL_PROXY point
//    here): CONNECT host:port (then the TLS SNI, if any, must equal host), or absolute-form
//    requests ("GET http://host/..."; the Host header must equal the URI's host; the request is
//    forwarded in origin-form with Connection: close, Proxy-* headers removed). Denied: 403
//    with a one-line reason.
//  * DNS (UDP and TCP): a name the policy allows is forwarded to the upstream servers under a
//    fresh id and the answer relayed back (its A/AAAA records remembered for this sandbox);
//    any other name gets NXDOMAIN and is never sent anywhere (no tunnelling through lookups).
// Every decision is logged to the EgressSink; allowed connections again when they close.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "net/allow_rules.h"
#include "net/ip_address.h"
#include "net/netns.h"

namespace bulkhead::net {

// One line of GET /v1/sandboxes/{id}/egress.
struct EgressRecord {
  int64_t id = 0;             // set by the sink (row id); 0 before
  std::string sandbox_id;
  int64_t time_ms = 0;        // unix ms when the connection (or lookup) was decided
  std::string protocol;       // "tcp" | "dns"
  std::string name;           // the destination name if known, else ""
  std::string address;        // the address connected to (or asked for), "" for a denied name
  uint16_t port = 0;          // destination port (53 for dns)
  std::string query_type;     // dns only: "A", "AAAA", "TXT", ... (else "")
  bool allowed = false;
  std::string reason;         // why denied, or why cut ("policy changed")
  int64_t bytes_out = 0;      // sandbox -> destination
  int64_t bytes_in = 0;       // destination -> sandbox
  int64_t duration_ms = 0;
  bool open = false;          // still connected (only in Open() answers, never stored)
};

// A record as GET /v1/sandboxes/{id}/egress shows it, and bulkhead-oci's pod egress log.
nlohmann::json EgressRecordToJson(const EgressRecord& record);

// Where the proxy writes its log (the state database). Called on proxy threads; must be
// thread-safe and quick.
class EgressSink {
 public:
  virtual ~EgressSink() = default;
  // A decision: answers the record's id (for Finish).
  virtual int64_t Begin(const EgressRecord& record) = 0;
  // An allowed connection ended (or was cut): its byte counts, duration and any reason.
  virtual void Finish(int64_t id, int64_t bytes_out, int64_t bytes_in, int64_t duration_ms,
                      const std::string& reason) = 0;
};

struct EgressProxyOptions {
  // Upstream DNS servers ("198.18.0.53", "[2001:db8::53]:5353"); empty = the nameservers of
  // the host's /etc/resolv.conf.
  std::vector<std::string> dns_servers;
  int threads = 2;
  std::chrono::milliseconds connect_timeout{10000};
};

class EgressProxy {
 public:
  static Result<std::unique_ptr<EgressProxy>> Start(EgressProxyOptions options, EgressSink& sink);
  virtual ~EgressProxy() = default;  // stops the threads, closes every connection

  // Starts serving a sandbox (or replaces its listeners after ConfigureNetns ran again).
  virtual void Attach(const std::string& sandbox_id, NetnsListeners listeners, Policy policy) = 0;
  // A new policy for an attached sandbox: applies to new connections and lookups at once, and
  // cuts the open connections it no longer allows (logged with reason "policy changed").
  virtual void SetPolicy(const std::string& sandbox_id, Policy policy) = 0;
  // Stops serving the sandbox and closes its connections. Safe for unknown ids.
  virtual void Detach(const std::string& sandbox_id) = 0;
  // The sandbox's connections open right now, with their byte counts so far.
  virtual std::vector<EgressRecord> Open(const std::string& sandbox_id) = 0;
  // A socket the daemon listens on: denied to every sandbox from now on (allow_rules.h).
  virtual void AddDaemonListener(const DaemonListener& listener) = 0;
};

}  // namespace bulkhead::net
