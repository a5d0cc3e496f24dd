#include "core/spec_json.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

namespace bulkhead::core {
using json = nlohmann::json;

std::string SpecToJson(const SandboxSpec& s) {
  json j = {{"image", s.image},
            {"runtime", s.runtime},
            {"cpus", s.cpus},
            {"memory_mb", s.memory_mb},
            {"disk_mb", s.disk_mb},
            {"pids", s.pids},
            {"timeout_s", s.timeout_s},
            {"idle_timeout_s", s.idle_timeout_s},
            {"on_timeout", s.on_timeout},
            {"env", s.env},
            {"workdir", s.workdir},
            {"user", s.user},
            {"network", {{"mode", s.network.mode}, {"allow", s.network.allow}, {"deny", s.network.deny}}},
            {"metadata", s.metadata}};
  json volumes = json::array();
  for (const auto& v : s.volumes) volumes.push_back({{"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
  j["volumes"] = std::move(volumes);
  j["preview"] = {{"public", s.preview.is_public}, {"token", s.preview.token}};
  j["sudo_users"] = s.sudo_users;
  if (s.from_snapshot) j["from_snapshot"] = *s.from_snapshot;
  if (!s.image_ref.empty()) j["image_ref"] = s.image_ref;
  if (s.e2b_auto_resume) j["e2b_auto_resume"] = true;
  if (!s.tenant.empty()) j["tenant"] = s.tenant;
  return j.dump();
}

Result<SandboxSpec> SpecFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return MakeError(ErrorCode::kInternal, "corrupt sandbox spec in the state database");
  // Integers as SpecToJson writes them; anything else is a corrupt row (a float such as 1e22
  // does not even fit the conversion).
  auto integer = [&j](const char* key) {
    const json& value = j.at(key);
    if (!value.is_number_integer()) throw std::invalid_argument(std::string(key) + " is not an integer");
    return value.get<int64_t>();
  };
  try {
    SandboxSpec s;
    s.image = j.at("image").get<std::string>();
    s.image_ref = j.value("image_ref", std::string());
    s.runtime = j.at("runtime").get<std::string>();
    s.cpus = j.at("cpus").get<double>();
    s.memory_mb = integer("memory_mb");
    s.disk_mb = integer("disk_mb");
    s.pids = integer("pids");
    s.timeout_s = integer("timeout_s");
    s.idle_timeout_s = integer("idle_timeout_s");
    s.on_timeout = j.at("on_timeout").get<std::string>();
    s.env = j.at("env").get<std::map<std::string, std::string>>();
    s.workdir = j.at("workdir").get<std::string>();
    s.user = j.at("user").get<std::string>();
    s.network.mode = j.at("network").at("mode").get<std::string>();
    s.network.allow = j.at("network").at("allow").get<std::vector<std::string>>();
    // Rows written before deny entries existed have none.
    s.network.deny = j.at("network").value("deny", std::vector<std::string>{});
    s.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    // Rows written before volumes existed have none.
    for (const auto& v : j.value("volumes", json::array()))
      s.volumes.push_back(
          {v.at("name").get<std::string>(), v.at("path").get<std::string>(), v.at("read_only").get<bool>()});
    // Rows written before private previews existed are public.
    if (j.contains("preview")) {
      s.preview.is_public = j.at("preview").at("public").get<bool>();
      s.preview.token = j.at("preview").at("token").get<std::string>();
    }
    // Rows written before sudo existed have none.
    s.sudo_users = j.value("sudo_users", std::vector<std::string>{});
    if (j.contains("from_snapshot")) s.from_snapshot = j.at("from_snapshot").get<std::string>();
    s.e2b_auto_resume = j.value("e2b_auto_resume", false);
    s.tenant = j.value("tenant", std::string());
    return s;
  } catch (const std::exception& e) {  // json::exception, or a field of the wrong kind
    return MakeError(ErrorCode::kInternal, std::string("corrupt sandbox spec: ") + e.what());
  }
}

}  // namespace bulkhead::core
