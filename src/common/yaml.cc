// Implements the strict YAML reader over yaml-cpp. yaml-cpp reports 0-based lines; users count
// from 1.
#include "common/yaml.h"

#include <cmath>

#include "common/duration.h"
#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::yaml {

absl::StatusOr<YAML::Node> Parse(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        Printable(fmt::format("{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.msg)));
  }
}

absl::StatusOr<YAML::Node> Load(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

absl::Status Reader::Error(const YAML::Node& node, std::string_view path,
                           std::string_view message) const {
  const int line = node.IsDefined() ? node.Mark().line + 1 : 0;
  if (line > 0) {
    return absl::InvalidArgumentError(
        Printable(fmt::format("{}:{}: {}: {}", source_, line, path, message)));
  }
  return absl::InvalidArgumentError(Printable(fmt::format("{}: {}: {}", source_, path, message)));
}

absl::Status Reader::ExpectMap(const YAML::Node& node, std::string_view path,
                               std::initializer_list<std::string_view> allowed) const {
  if (!node.IsMap()) return Error(node, path, "expected a mapping of keys to values");
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    bool known = false;
    for (std::string_view name : allowed) known |= key == name;
    if (!known) {
      std::string names;
      for (std::string_view name : allowed)
        names += fmt::format("{}{}", names.empty() ? "" : ", ", name);
      return Error(entry.first, path, fmt::format("unknown key '{}' (known: {})", key, names));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> Reader::Duration(const YAML::Node& node,
                                                std::string_view path) const {
  if (!node.IsScalar()) return Error(node, path, "expected a duration such as 30s");
  auto duration = ParseDuration(node.Scalar());
  if (!duration.ok()) return Error(node, path, MessageOf(duration.status()));
  return *duration;
}

absl::StatusOr<int64_t> Reader::Int(const YAML::Node& node, std::string_view path) const {
  std::optional<int64_t> value;
  if (node.IsScalar()) value = ParseInt64(Trim(node.Scalar()));
  if (!value) return Error(node, path, "expected an integer");
  return *value;
}

absl::StatusOr<double> Reader::Double(const YAML::Node& node, std::string_view path) const {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(value)) return value;
  }
  return Error(node, path, "expected a number");
}

absl::StatusOr<std::string> Reader::String(const YAML::Node& node, std::string_view path) const {
  if (!node.IsScalar()) return Error(node, path, "expected a string");
  return node.Scalar();
}

}  // namespace vigil::yaml
