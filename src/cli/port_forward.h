// `bulkhead port-forward ID PORT [LOCAL_PORT]`: listens on 127.0.0.1:LOCAL_PORT and carries
// each accepted connection to the sandbox's PORT over a connection of its own to the daemon
// (GET /v1/sandboxes/{id}/tcp/{port} upgraded to raw TCP), until SIGINT or SIGTERM.
#pragma once
#include <string>

#include "cli/session.h"
#include "client/http_client.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {

// A connection to the daemon switched to raw TCP with a sandbox's port. `early` holds bytes
// of the app that arrived together with the 101.
struct TcpTunnel {
  UniqueFd fd;
  std::string early;
};

// Opens one tunnel (blocking). The daemon's refusal (port_not_listening, sandbox_not_found...)
// comes back as its Error.
Result<TcpTunnel> OpenTcpTunnel(const HttpClient& http, const std::string& sandbox_id, int port);

int PortForwardCommand(Session& session);

}  // namespace bulkhead::cli
