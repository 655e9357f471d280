// Parses and validates scenario files.
#include "inject/scenario.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"
#include "common/yaml.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil {
namespace {

class Parser {
 public:
  Parser(std::string source, const ScenarioLimits& limits)
      : reader_(std::move(source)), limits_(limits) {}

  absl::StatusOr<ScenarioPlan> Parse(const YAML::Node& document) {
    if (auto status = reader_.ExpectMap(document, "(top level)", {"name", "description", "steps"});
        !status.ok()) {
      return status;
    }
    ScenarioPlan plan;
    if (document["name"]) {
      auto name = reader_.String(document["name"], "name");
      if (!name.ok()) return name.status();
      plan.name = *name;
    }
    if (document["description"]) {
      auto description = reader_.String(document["description"], "description");
      if (!description.ok()) return description.status();
      plan.description = *description;
    }
    const YAML::Node steps = document["steps"];
    if (!steps || !steps.IsSequence() || steps.size() == 0) {
      return reader_.Error(steps ? steps : document, "steps",
                           "a scenario needs a list of steps (each with `at` and one of inject, "
                           "xid, clear)");
    }
    if (steps.size() > limits_.max_steps) {
      return reader_.Error(steps, "steps",
                           fmt::format("{} steps; at most {}", steps.size(), limits_.max_steps));
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      auto step = ParseStep(steps[i], fmt::format("steps[{}]", i));
      if (!step.ok()) return step.status();
      plan.steps.push_back(*step);
    }
    std::stable_sort(plan.steps.begin(), plan.steps.end(),
                     [](const ScenarioStep& a, const ScenarioStep& b) { return a.at < b.at; });
    plan.length = plan.steps.back().at;
    if (plan.name.empty()) plan.name = "unnamed";
    return plan;
  }

 private:
  absl::StatusOr<ScenarioStep> ParseStep(const YAML::Node& node, const std::string& path) {
    if (auto status = reader_.ExpectMap(node, path, {"at", "inject", "xid", "clear"});
        !status.ok()) {
      return status;
    }
    ScenarioStep step;
    step.line = node.Mark().line + 1;
    if (!node["at"]) return reader_.Error(node, path, "every step needs `at` (e.g. at: 10s)");
    auto at = reader_.Duration(node["at"], path + ".at");
    if (!at.ok()) return at.status();
    if (*at > limits_.max_length) {
      return reader_.Error(
          node["at"], path + ".at",
          fmt::format("{} is past the longest scenario, {}", absl::FormatDuration(*at),
                      absl::FormatDuration(limits_.max_length)));
    }
    step.at = *at;
    const int actions = (node["inject"] ? 1 : 0) + (node["xid"] ? 1 : 0) + (node["clear"] ? 1 : 0);
    if (actions != 1) {
      return reader_.Error(node, path, "each step needs exactly one of inject, xid, clear");
    }
    absl::Status status;
    if (node["inject"]) {
      status = ParseInject(node["inject"], path + ".inject", &step);
    } else if (node["xid"]) {
      status = ParseXid(node["xid"], path + ".xid", &step);
    } else {
      status = ParseClear(node["clear"], path + ".clear", &step);
    }
    if (!status.ok()) return status;
    return step;
  }

  absl::Status ParseGpu(const YAML::Node& node, const std::string& path, uint32_t* gpu) {
    if (!node["gpu"]) return reader_.Error(node, path, "needs `gpu`");
    auto value = reader_.Int(node["gpu"], path + ".gpu");
    if (!value.ok()) return value.status();
    if (*value < 0 || *value >= static_cast<int64_t>(limits_.gpu_count)) {
      return reader_.Error(
          node["gpu"], path + ".gpu",
          fmt::format("GPU {} does not exist: this engine has {} GPU{} (0-{})", *value,
                      limits_.gpu_count, limits_.gpu_count == 1 ? "" : "s", limits_.gpu_count - 1));
    }
    *gpu = static_cast<uint32_t>(*value);
    return absl::OkStatus();
  }

  absl::StatusOr<const FieldInfo*> ParseField(const YAML::Node& node, const std::string& path) {
    if (!node["field"]) return reader_.Error(node, path, "needs `field` (a DCGM name or ID)");
    auto name = reader_.String(node["field"], path + ".field");
    if (!name.ok()) return name.status();
    auto field = ResolveField(*name);
    if (!field.ok())
      return reader_.Error(node["field"], path + ".field", MessageOf(field.status()));
    return *field;
  }

  // A port step's port and field (`port` and `field`, strings); the check is check_port's.
  absl::Status ParsePort(const YAML::Node& node, const std::string& path, ScenarioStep* step) {
    if (node["gpu"]) {
      return reader_.Error(node, path, "name a `gpu` or a NIC `port`, not both");
    }
    if (!limits_.check_port) {
      return reader_.Error(node["port"], path + ".port",
                           "this engine reads no NIC ports (--sysfs-root, --sim-nics)");
    }
    auto port = reader_.String(node["port"], path + ".port");
    if (!port.ok()) return port.status();
    if (!node["field"]) {
      return reader_.Error(node, path, "needs `field` (state, phys_state, rate or a counter)");
    }
    auto field = reader_.String(node["field"], path + ".field");
    if (!field.ok()) return field.status();
    step->port = *port;
    step->port_field = *field;
    return absl::OkStatus();
  }

  absl::Status ParseDuration(const YAML::Node& node, const std::string& path, ScenarioStep* step) {
    if (!node["for"]) return absl::OkStatus();
    auto duration = reader_.Duration(node["for"], path + ".for");
    if (!duration.ok()) return duration.status();
    if (*duration <= absl::ZeroDuration() || *duration > limits_.max_injection) {
      return reader_.Error(node["for"], path + ".for",
                           fmt::format("must be more than 0 and at most {}",
                                       absl::FormatDuration(limits_.max_injection)));
    }
    step->duration = *duration;
    return absl::OkStatus();
  }

  absl::Status ParsePortInject(const YAML::Node& node, const std::string& path,
                               ScenarioStep* step) {
    step->action = ScenarioStep::Action::kInjectPort;
    if (auto status = ParsePort(node, path, step); !status.ok()) return status;
    if (node["value"].IsDefined() == node["add"].IsDefined()) {
      return reader_.Error(node, path, "needs exactly one of `value` and `add`");
    }
    if (node["value"]) {
      auto value = reader_.Double(node["value"], path + ".value");
      if (!value.ok()) return value.status();
      step->value = *value;
    } else {
      auto add = reader_.Int(node["add"], path + ".add");
      if (!add.ok()) return add.status();
      if (*add <= 0) return reader_.Error(node["add"], path + ".add", "must be positive");
      step->add = *add;
    }
    if (auto status = ParseDuration(node, path, step); !status.ok()) return status;
    const absl::Status checked = limits_.check_port({.port = step->port,
                                                     .field = step->port_field,
                                                     .value = step->value,
                                                     .add = step->add,
                                                     .duration = step->duration});
    if (!checked.ok()) return reader_.Error(node, path, MessageOf(checked));
    return absl::OkStatus();
  }

  absl::Status ParseInject(const YAML::Node& node, const std::string& path, ScenarioStep* step) {
    if (auto status =
            reader_.ExpectMap(node, path, {"gpu", "port", "field", "value", "add", "for"});
        !status.ok()) {
      return status;
    }
    if (node["port"]) return ParsePortInject(node, path, step);
    step->action = ScenarioStep::Action::kInjectField;
    if (auto status = ParseGpu(node, path, &step->gpu); !status.ok()) return status;
    auto field = ParseField(node, path);
    if (!field.ok()) return field.status();
    step->field = (*field)->id;
    if ((*field)->type == FieldType::kString || (*field)->from_events) {
      return reader_.Error(node["field"], path + ".field",
                           fmt::format("{} cannot be injected{}", (*field)->name,
                                       (*field)->from_events ? ": use an xid step" : ""));
    }
    if (node["value"].IsDefined() == node["add"].IsDefined()) {
      return reader_.Error(node, path, "needs exactly one of `value` and `add`");
    }
    if (node["value"]) {
      auto value = reader_.Double(node["value"], path + ".value");
      if (!value.ok()) return value.status();
      if ((*field)->type == FieldType::kInt64 && *value != std::trunc(*value)) {
        return reader_.Error(node["value"], path + ".value",
                             fmt::format("{} takes an integer", (*field)->name));
      }
      step->value = *value;
    } else {
      if (!(*field)->cumulative) {
        return reader_.Error(
            node["add"], path + ".add",
            fmt::format("{} is not a cumulative counter: use `value`", (*field)->name));
      }
      auto add = reader_.Int(node["add"], path + ".add");
      if (!add.ok()) return add.status();
      if (*add <= 0) return reader_.Error(node["add"], path + ".add", "must be positive");
      step->add = *add;
    }
    return ParseDuration(node, path, step);
  }

  absl::Status ParseXid(const YAML::Node& node, const std::string& path, ScenarioStep* step) {
    if (auto status = reader_.ExpectMap(node, path, {"gpu", "xid"}); !status.ok()) return status;
    step->action = ScenarioStep::Action::kInjectXid;
    if (auto status = ParseGpu(node, path, &step->gpu); !status.ok()) return status;
    if (!node["xid"]) return reader_.Error(node, path, "needs `xid` (e.g. xid: 79)");
    auto xid = reader_.Int(node["xid"], path + ".xid");
    if (!xid.ok()) return xid.status();
    if (*xid < 1 || *xid > 999) {
      return reader_.Error(node["xid"], path + ".xid", "NVIDIA's XIDs are 1 to 999");
    }
    step->xid = static_cast<uint32_t>(*xid);
    return absl::OkStatus();
  }

  absl::Status ParseClear(const YAML::Node& node, const std::string& path, ScenarioStep* step) {
    if (node.IsScalar()) {
      if (node.Scalar() != "all") {
        return reader_.Error(node, path,
                             "use `clear: all`, `clear: {gpu: N, field: NAME}` or `clear: {port: "
                             "HCA/PORT, field: NAME}`");
      }
      step->action = ScenarioStep::Action::kClearAll;
      return absl::OkStatus();
    }
    if (auto status = reader_.ExpectMap(node, path, {"gpu", "port", "field"}); !status.ok()) {
      return status;
    }
    if (node["port"]) {
      step->action = ScenarioStep::Action::kClearPort;
      return ParsePort(node, path, step);
    }
    step->action = ScenarioStep::Action::kClearField;
    if (auto status = ParseGpu(node, path, &step->gpu); !status.ok()) return status;
    auto field = ParseField(node, path);
    if (!field.ok()) return field.status();
    step->field = (*field)->id;
    return absl::OkStatus();
  }

  yaml::Reader reader_;
  const ScenarioLimits& limits_;
};

}  // namespace

absl::StatusOr<ScenarioPlan> ParseScenario(std::string_view yaml_text, std::string_view source,
                                           const ScenarioLimits& limits) {
  auto document = yaml::Parse(yaml_text, source);
  if (!document.ok()) return document.status();
  if (document->IsNull()) {
    return absl::InvalidArgumentError(fmt::format("{}: the scenario is empty", source));
  }
  return yaml::Guard<ScenarioPlan>(
      source, [&] { return Parser(std::string(source), limits).Parse(*document); });
}

}  // namespace vigil
