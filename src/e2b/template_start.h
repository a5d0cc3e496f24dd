// What a sandbox created from an E2B template with a start command gets before create
// answers: E2B snapshots a template's VM once its start command is ready, so its sandboxes
// begin with that process running; here the start command is started in each new sandbox (as
// its user, in its working directory, with its environment) and its ready command run until it
// succeeds, E2B's promise either way.
#pragma once
#include <chrono>
#include <string>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>

#include "common/result.h"
#include "core/sandbox_manager.h"

namespace bulkhead::e2b {

// The start and ready commands an image's labels hold (template_plan.h); both empty for an
// image that is no E2B template or has none.
struct StartCommands {
  std::string start;
  std::string ready;
};
StartCommands StartCommandsOf(const core::ImageInfo& image);

// E2B's cap on the wait for a template's ready command.
inline constexpr std::chrono::seconds kReadyLimit{600};

// Starts `start` (if any) as a background process tagged "e2b-start" and runs `ready` (if
// any) until it exits 0, a little longer between tries up to a second. 422 start_failed when
// the start command ends with an error first or the ready command never succeeds by `limit`.
boost::asio::awaitable<Status> StartTemplateCommands(core::SandboxManager& manager, std::string sandbox_id,
                                                     StartCommands commands, std::chrono::milliseconds limit);

}  // namespace bulkhead::e2b
