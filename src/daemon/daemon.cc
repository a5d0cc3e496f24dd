#include "daemon/daemon.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "common/result.h"
#include "core/host_limits.h"
#include "core/sandbox_manager.h"
#include "core/audit_log.h"
#include "core/state_dir.h"
#include "daemon/server.h"
#include "service/access_keys.h"
#include "service/api_key.h"

namespace bulkhead::api {
namespace {

// The spool dir of uploads, in the (secured) state dir: made, or checked to be a directory.
Status EnsureUploadDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + path, errno);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return SystemError("stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) return MakeError(ErrorCode::kInternal, path + " exists and is not a directory");
  if (chmod(path.c_str(), 0700) != 0) return SystemError("chmod " + path, errno);
  return {};
}

// Uploads and builds interrupted by a crash leave spool files and build directories behind;
// nothing else uses them. (remove_all follows no symlink a build context held.)
void RemoveStaleUploads(const std::string& upload_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(upload_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("upload-") || name.starts_with("build-")) std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

int RunDaemon(const core::DaemonConfig& config) {
  // A client that hangs up must not kill the daemon on the next write.
  signal(SIGPIPE, SIG_IGN);
  core::RaiseHostLimits(config.max_sandboxes);
  // Whatever the daemon makes (the database, keys, spooled uploads, layers) is root's alone;
  // the sandboxes' own files get modes of their own (runtime/native/contain.cc).
  umask(077);

  const std::string& state_dir = config.state_dir;
  if (Status status = core::SecureStateDir(state_dir); !status.ok()) {
    spdlog::error("state directory: {}", status.error().message);
    return 1;
  }
  const std::string upload_dir = state_dir + "/tmp";
  if (Status status = EnsureUploadDir(upload_dir); !status.ok()) {
    spdlog::error("upload directory: {}", status.error().message);
    return 1;
  }
  RemoveStaleUploads(upload_dir);

  Result<std::string> api_key = LoadOrCreateApiKey(state_dir, config.api_key);
  if (!api_key.ok()) {
    spdlog::error("API key: {}", api_key.error().message);
    return 1;
  }

  Result<std::unique_ptr<core::AuditLog>> audit = core::AuditLog::Open(state_dir + "/audit.log");
  if (!audit.ok()) {
    spdlog::error("audit log: {}", audit.error().message);
    return 1;
  }
  if (config.audit_keep_days > 0) (*audit)->KeepFor(std::chrono::hours(24 * config.audit_keep_days));

  std::shared_ptr<TlsEndpoint> tls;
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    spdlog::error("TLS: --tls-cert and --tls-key go together");
    return 1;
  }
  if (!config.tls_cert.empty()) {
    Result<std::shared_ptr<TlsEndpoint>> loaded = TlsEndpoint::Server(config.tls_cert, config.tls_key);
    if (!loaded.ok()) {
      spdlog::error("{}", loaded.error().message);
      return 1;
    }
    tls = *loaded;
    if (struct stat st{}; stat(config.tls_key.c_str(), &st) == 0 && (st.st_mode & 0077))
      spdlog::warn("TLS key {} is readable by users other than its owner", config.tls_key);
  }

  Result<std::string> e2b_key = LoadOrCreateE2bKey(state_dir);
  if (!e2b_key.ok()) {
    spdlog::error("E2B key: {}", e2b_key.error().message);
    return 1;
  }

  core::DaemonConfig manager_config = config;
  Result<std::string> memory_image_key = LoadOrCreateMemoryImageKey(state_dir);
  if (!memory_image_key.ok()) {
    spdlog::error("memory image key: {}", memory_image_key.error().message);
    return 1;
  }
  manager_config.memory_image_key = *memory_image_key;
  if (!manager_config.registry.auth_file.empty()) {
    auto logins = storage::ReadDockerAuthFile(manager_config.registry.auth_file);
    if (!logins.ok()) {
      spdlog::error("{}", logins.error().message);
      return 1;
    }
    manager_config.registry.logins = std::move(*logins);
  }

  spdlog::info("bulkhead {} opening state in {}", BULKHEAD_VERSION, state_dir);
  Result<std::unique_ptr<core::SandboxManager>> opened = core::SandboxManager::Open(manager_config);
  if (!opened.ok()) {
    spdlog::error("cannot open the sandbox manager: {}", opened.error().message);
    return 1;
  }
  std::unique_ptr<core::SandboxManager> manager = std::move(opened.value());
  Result<std::unique_ptr<AccessKeys>> keys = AccessKeys::Open(state_dir + "/bulkhead.db", *api_key);
  if (!keys.ok()) {
    spdlog::error("tenants and keys: {}", keys.error().message);
    return 1;
  }

  const std::string socket_path = state_dir + "/bulkhead.sock";
  bool serving = true;
  {
    ApiServer server(*manager, ServerOptions{
                                   .api_key = *api_key,
                                   .io_threads = std::max(1, config.io_threads),
                                   .blocking_threads = std::max(1, config.blocking_threads),
                                   .upload_dir = upload_dir,
                                   .handle_signals = true,
                                   .preview_domain = config.preview_domain,
                                   .e2b_key = *e2b_key,
                                   .e2b_domain = config.e2b_domain,
                                   .audit = audit->get(),
                                   .keys = keys->get(),
                                   .tls = tls,
                               });
    if (!config.listen.empty()) {
      auto endpoint = server.ListenTcp(config.listen);
      if (!endpoint.ok()) {
        spdlog::error("cannot listen on {}: {}", config.listen, endpoint.error().message);
        serving = false;
      }
    }
    if (serving && !config.e2b_listen.empty()) {
      auto endpoint = server.ListenE2b(config.e2b_listen);
      if (!endpoint.ok() && config.e2b_listen_given) {
        spdlog::error("cannot listen on {} (E2B front): {}", config.e2b_listen, endpoint.error().message);
        serving = false;
      } else if (!endpoint.ok()) {
        // Only the default address: the API serves on without the E2B front.
        spdlog::warn("no E2B front: cannot listen on {}: {} (choose one with --e2b-listen)", config.e2b_listen,
                     endpoint.error().message);
      }
    }
    if (serving) {
      if (Status status = server.ListenUnix(socket_path); !status.ok()) {
        spdlog::error("cannot listen on {}: {}", socket_path, status.error().message);
        serving = false;
      }
    }
    if (serving) server.Run();
  }
  // The server is gone (no request can reach the manager any more); now the core stops.
  manager->Shutdown();
  if (serving) unlink(socket_path.c_str());
  spdlog::info("bulkhead stopped");
  return serving ? 0 : 1;
}

}  // namespace bulkhead::api
