// How the daemon reaches image registries: what `serve` was told about them.
#pragma once
#include <map>
#include <set>
#include <string>

namespace bulkhead::storage {

struct RegistryLogin {
  std::string username;
  std::string password;
};

// How the daemon reaches registries (serve's --default-registry, --insecure-registry,
// --registry-auth, --registry-ca).
struct RegistrySettings {
  // Where a name without a registry ("team/py:3.12", "busybox") is looked up; "" = nowhere.
  std::string default_registry;
  // Registries spoken to in plain HTTP: host:port, or a host for all its ports. Never implied.
  std::set<std::string> insecure;
  // Logins by registry host[:port], read at start from auth_file (a Docker config.json).
  std::string auth_file;
  std::map<std::string, RegistryLogin> logins;
  std::string ca_file;  // CA certificates trusted beside the system's
  int connect_timeout_ms = 15000;
  int idle_timeout_ms = 60000;
};

}  // namespace bulkhead::storage
