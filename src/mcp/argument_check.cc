#include "mcp/argument_check.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace bulkhead::mcp {
namespace {

using nlohmann::json;

bool HasType(const json& value, const std::string& type) {
  if (type == "string") return value.is_string();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    // 3.0 is an integer in JSON Schema; only whole numbers within double's exact range.
    if (!value.is_number_float()) return false;
    const double number = value.get<double>();
    return std::isfinite(number) && std::floor(number) == number && std::fabs(number) < 9007199254740992.0;
  }
  if (type == "number") return value.is_number();
  if (type == "boolean") return value.is_boolean();
  if (type == "array") return value.is_array();
  if (type == "object") return value.is_object();
  if (type == "null") return value.is_null();
  return false;
}

std::string Describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string Article(const std::string& type) {
  return (type == "integer" || type == "object" || type == "array") ? "an " + type : "a " + type;
}

std::string Where(const std::string& path) { return path.empty() ? "the arguments" : "'" + path + "'"; }

std::optional<std::string> Check(const json& schema, const json& value, const std::string& path) {
  if (auto type = schema.find("type"); type != schema.end()) {
    std::vector<std::string> types;
    if (type->is_string()) types.push_back(type->get<std::string>());
    if (type->is_array()) {
      for (const json& t : *type) types.push_back(t.get<std::string>());
    }
    bool fits = false;
    for (const std::string& t : types) fits = fits || HasType(value, t);
    if (!fits) {
      std::string wanted;
      for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] == "null") continue;
        wanted += (wanted.empty() ? "" : " or ") + Article(types[i]);
      }
      return Where(path) + " must be " + wanted + ", not " + Describe(value);
    }
  }
  if (value.is_null()) return std::nullopt;

  if (auto choices = schema.find("enum"); choices != schema.end()) {
    bool listed = false;
    std::string names;
    for (const json& choice : *choices) {
      listed = listed || choice == value;
      names += (names.empty() ? "" : ", ") + choice.dump();
    }
    if (!listed) return Where(path) + " must be one of " + names + ", not " + Describe(value);
  }
  if (value.is_number()) {
    const double number = value.get<double>();
    auto minimum = schema.find("minimum");
    auto maximum = schema.find("maximum");
    const bool too_small = minimum != schema.end() && number < minimum->get<double>();
    const bool too_large = maximum != schema.end() && number > maximum->get<double>();
    if (too_small || too_large) {
      std::string range = minimum != schema.end() && maximum != schema.end()
                              ? "from " + minimum->dump() + " to " + maximum->dump()
                          : minimum != schema.end() ? "at least " + minimum->dump()
                                                    : "at most " + maximum->dump();
      return Where(path) + " must be " + range + ", not " + Describe(value);
    }
  }
  if (value.is_string()) {
    const size_t length = value.get_ref<const std::string&>().size();
    if (auto minimum = schema.find("minLength"); minimum != schema.end() && length < minimum->get<size_t>()) {
      return Where(path) + (minimum->get<size_t>() == 1 ? " must not be empty"
                                                          : " must have at least " + minimum->dump() + " characters");
    }
    if (auto maximum = schema.find("maxLength"); maximum != schema.end() && length > maximum->get<size_t>()) {
      return Where(path) + " is too long (at most " + maximum->dump() + " bytes)";
    }
  }
  if (value.is_array()) {
    if (auto minimum = schema.find("minItems"); minimum != schema.end() && value.size() < minimum->get<size_t>()) {
      return Where(path) + " must have at least " + minimum->dump() + " item(s)";
    }
    if (auto maximum = schema.find("maxItems"); maximum != schema.end() && value.size() > maximum->get<size_t>()) {
      return Where(path) + " may have at most " + maximum->dump() + " items";
    }
    if (auto items = schema.find("items"); items != schema.end()) {
      for (size_t i = 0; i < value.size(); ++i) {
        if (auto problem = Check(*items, value[i], path + "[" + std::to_string(i) + "]")) return problem;
      }
    }
  }
  if (value.is_object()) {
    const json properties = schema.value("properties", json::object());
    for (const json& name : schema.value("required", json::array())) {
      const std::string key = name.get<std::string>();
      if (!value.contains(key)) return "missing required argument '" + (path.empty() ? key : path + "." + key) + "'";
    }
    auto additional = schema.find("additionalProperties");
    for (auto& [key, item] : value.items()) {
      const std::string item_path = path.empty() ? key : path + "." + key;
      if (auto property = properties.find(key); property != properties.end()) {
        if (auto problem = Check(*property, item, item_path)) return problem;
      } else if (additional != schema.end() && additional->is_boolean() && !additional->get<bool>()) {
        std::string known;
        for (auto& [name, unused] : properties.items()) known += (known.empty() ? "" : ", ") + name;
        return "unknown argument '" + item_path + "'; the arguments are: " + known;
      } else if (additional != schema.end() && additional->is_object()) {
        if (auto problem = Check(*additional, item, item_path)) return problem;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> CheckArguments(const json& schema, const json& arguments) {
  return Check(schema, arguments, "");
}

}  // namespace bulkhead::mcp
