#include "api/json_output.h"

#include <signal.h>
#include <string.h>

#include "common/time_format.h"

namespace bulkhead::api {

using nlohmann::json;

json SandboxToJson(const core::SandboxInfo& sandbox) {
  const core::SandboxSpec& spec = sandbox.spec;
  json out = {
      {"id", sandbox.id},
      {"state", sandbox.state},
      // What the create named; image_id is the stored image that runs (a pulled one's digest).
      {"image", spec.image_ref.empty() ? spec.image : spec.image_ref},
      {"image_id", spec.image},
      {"runtime", spec.runtime},
      {"created_at", sandbox.created_at},
      {"expires_at", sandbox.expires_at ? json(*sandbox.expires_at) : json(nullptr)},
      {"cpus", spec.cpus},
      {"memory_mb", spec.memory_mb},
      {"disk_mb", spec.disk_mb},
      {"pids", spec.pids},
      {"timeout_s", spec.timeout_s},
      {"idle_timeout_s", spec.idle_timeout_s},
      {"on_timeout", spec.on_timeout},
      {"network", {{"mode", spec.network.mode}, {"allow", spec.network.allow}, {"deny", spec.network.deny}}},
      {"metadata", spec.metadata},
      {"env", spec.env},
      {"workdir", spec.workdir},
      {"user", spec.user},
      {"sudo_users", spec.sudo_users},
      {"parent_snapshot", sandbox.parent_snapshot ? json(*sandbox.parent_snapshot) : json(nullptr)},
      {"paused_to_disk", sandbox.paused_to_disk},
      {"tenant", spec.tenant.empty() ? json(nullptr) : json(spec.tenant)},
  };
  json volumes = json::array();
  for (const auto& v : spec.volumes) {
    volumes.push_back({{"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
  }
  out["volumes"] = std::move(volumes);
  out["preview"] = {{"public", spec.preview.is_public}};
  if (!spec.preview.is_public) out["preview"]["token"] = spec.preview.token;
  if (sandbox.usage) {
    out["usage"] = {
        {"cpu_s", sandbox.usage->cpu_s},
        {"memory_bytes", sandbox.usage->memory_bytes},
        {"disk_bytes", sandbox.usage->disk_bytes},
        {"pids", sandbox.usage->pids},
    };
  }
  if (!sandbox.runtime_details.empty()) {
    json details = json::object();
    for (const auto& [name, value] : sandbox.runtime_details) details[name] = value;
    out["runtime_details"] = std::move(details);
  }
  return out;
}

json ImageToJson(const core::ImageInfo& image) {
  json out = {
      {"name", image.name},
      {"source", image.source},
      {"created_at", image.created_at},
      {"size_bytes", image.size_bytes},
  };
  if (image.source == "registry") out["digest"] = image.digest;
  if (image.source == "registry" || image.source == "build" || !image.references.empty())
    out["references"] = image.references;
  // Whether it is the host's (every tenant runs it), and the tenants that hold it: the host's
  // key sees them all, a tenant's only itself (storage::ImageSeenBy).
  out["shared"] = image.shared;
  if (!image.tenants.empty()) out["tenants"] = image.tenants;
  if (image.config) {
    const storage::ImageConfig& c = *image.config;
    out["config"] = {{"os", c.os},
                     {"architecture", c.architecture},
                     {"env", c.env},
                     {"workdir", c.working_dir},
                     {"user", c.user},
                     {"entrypoint", c.entrypoint},
                     {"cmd", c.cmd},
                     {"exposed_ports", c.exposed_ports},
                     {"labels", c.labels}};
  }
  return out;
}

json VolumeToJson(const core::VolumeInfo& volume) {
  return {
      {"name", volume.name},
      {"tenant", volume.tenant.empty() ? json(nullptr) : json(volume.tenant)},
      {"size_mb", volume.size_mb},
      {"created_at", volume.created_at},
      {"used_bytes", volume.used_bytes},
      {"mounted_by", volume.mounted_by},
  };
}

json SnapshotToJson(const core::SnapshotInfo& snapshot) {
  return {
      {"id", snapshot.id},
      {"name", snapshot.name.empty() ? json(nullptr) : json(snapshot.name)},
      {"sandbox_id", snapshot.sandbox_id},
      {"created_at", snapshot.created_at},
      {"size_bytes", snapshot.size_bytes},
      {"memory", snapshot.memory},
      {"image", snapshot.image},
      {"runtime", snapshot.runtime},
      {"tenant", snapshot.tenant.empty() ? json(nullptr) : json(snapshot.tenant)},
  };
}

std::string SignalName(int signal) {
  if (signal >= SIGRTMIN && signal <= SIGRTMAX) {
    return signal == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(signal - SIGRTMIN);
  }
  if (const char* abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "SIG" + std::to_string(signal);
}

}  // namespace bulkhead::api
