// Connections to a guest's vsock ports through the host socket of its vsock device
// (vhost-device-vsock in Firecracker's model: "CONNECT <port>\n", then "OK <host port>\n").
//
// vhost-device-vsock 0.3.0 (the version install-microvm.sh pins) ends its device for good
// when a host connection closes between its CONNECT and the guest's answer: it writes the
// "OK" to the closed stream, and the EPIPE panics its vring worker. The guest is unreachable
// from then on. So no connection is closed in that window here: one given up on (a caller's
// timeout, a cancelled request) is held open until the answer or the end comes.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::runtime {

// Holds `connection` (its CONNECT sent, no answer read) open on a thread of its own until the
// device answers or ends it, or a minute passed; then closes it.
void HoldUntilAnswered(UniqueFd connection);

// Connects to `port` in the guest through the device socket `path` until its listener
// accepts (the device answers "OK"), trying again while the guest refuses; false from
// `alive` or the deadline ends the wait (a connection then pending is held, never closed).
Status WaitForGuestPort(const std::string& path, uint32_t port, const std::function<bool()>& alive,
                        std::chrono::steady_clock::time_point deadline);

}  // namespace bulkhead::runtime
