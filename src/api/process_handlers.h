// The process routes (/v1/sandboxes/{id}/processes...): start, list and inspect background
// processes, read their output (NDJSON), drive them (stdin, signals, pty size) and attach
// to them over a WebSocket. Each request is one or two conversations with the sandbox's init
// (init_process.h); the processes themselves live in init, not here.
#pragma once
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "api/router.h"
#include "core/sandbox_manager.h"
#include "http/http_exchange.h"

namespace bulkhead::api {

class ProcessHandlers {
 public:
  explicit ProcessHandlers(core::SandboxManager& manager) : manager_(manager) {}

  // Answers a request routed to one of the process routes.
  boost::asio::awaitable<void> Handle(HttpExchange& exchange, const RouteMatch& route, const QueryParams& query);

 private:
  boost::asio::awaitable<void> Create(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> List(HttpExchange& exchange, const std::string& id);
  boost::asio::awaitable<void> Get(HttpExchange& exchange, const std::string& id, const std::string& pid);
  boost::asio::awaitable<void> Output(HttpExchange& exchange, const std::string& id, const std::string& pid,
                                      const QueryParams& query);
  // stdin, stdin/close, signal and resize: frames on an attach connection without output.
  boost::asio::awaitable<void> Control(HttpExchange& exchange, RouteId route, const std::string& id,
                                       const std::string& pid);

  // A tag being started in a sandbox is reserved until init has it in its table, so two
  // concurrent starts with one tag cannot both pass the uniqueness check.
  bool ReserveTag(const std::string& sandbox_id, const std::string& tag);
  void ReleaseTag(const std::string& sandbox_id, const std::string& tag);

  core::SandboxManager& manager_;
  std::mutex tags_mutex_;
  std::set<std::pair<std::string, std::string>> starting_tags_;  // (sandbox id, tag)
};

}  // namespace bulkhead::api
