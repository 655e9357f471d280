// Implements the NIC ports' policy: the built-in rules with their sources, and the `network:`
// section of the engine config.
#include "health/network_policy.h"

#include <algorithm>

#include "common/yaml.h"
#include "fmt/format.h"

namespace vigil {
namespace {

constexpr std::string_view kNvSentinel =
    "NVIDIA NVSentinel nic-health-monitor's defaults (values.yaml, pkg/config/config.go)";
constexpr std::string_view kCable =
    "check the port's cable, transceiver and switch port (ibstat, mlxlink); replace what is "
    "faulty";

NetworkCounterRule Counter(std::string name, std::string counter, double over, absl::Duration per,
                           HealthStatus status, std::string code, std::string meaning,
                           std::string action = std::string(kCable)) {
  return NetworkCounterRule{.name = std::move(name),
                            .counter = std::move(counter),
                            .over = over,
                            .per = per,
                            .status = status,
                            .code = std::move(code),
                            .meaning = std::move(meaning),
                            .action = std::move(action),
                            .recommended = RecommendedAction::kInspect,
                            .source = std::string(kNvSentinel)};
}

absl::Status ReadInterval(const yaml::Reader& reader, const YAML::Node& node,
                          const std::string& path, absl::Duration min, absl::Duration max,
                          absl::Duration* out) {
  if (!node) return absl::OkStatus();
  auto value = reader.Duration(node, path);
  if (!value.ok()) return value.status();
  if (*value < min || *value > max) {
    return reader.Error(node, path,
                        fmt::format("out of range ({} .. {})", absl::FormatDuration(min),
                                    absl::FormatDuration(max)));
  }
  *out = *value;
  return absl::OkStatus();
}

absl::Status ApplyPorts(const yaml::Reader& reader, const YAML::Node& node, NetworkPolicy* policy) {
  if (!node) return absl::OkStatus();
  if (!node.IsMap()) {
    return reader.Error(node, "network.ports",
                        "expected a mapping of ports to GPU indexes, e.g. mlx5_0/1: [0]");
  }
  for (const auto& entry : node) {
    const std::string port = entry.first.Scalar();
    const std::string path = "network.ports." + port;
    const size_t slash = port.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == port.size()) {
      return reader.Error(entry.first, path, "a port is HCA/PORT, as sysfs names it: mlx5_0/1");
    }
    if (!entry.second.IsSequence()) {
      return reader.Error(entry.second, path, "expected a list of GPU indexes ([] for none)");
    }
    std::vector<uint32_t> gpus;
    for (const YAML::Node& gpu : entry.second) {
      auto index = reader.Int(gpu, path);
      if (!index.ok()) return index.status();
      if (*index < 0 || *index > 1023) return reader.Error(gpu, path, "a GPU index is 0 .. 1023");
      gpus.push_back(static_cast<uint32_t>(*index));
    }
    policy->ports[port] = std::move(gpus);
  }
  return absl::OkStatus();
}

absl::Status ApplyState(const yaml::Reader& reader, const YAML::Node& node, NetworkPolicy* policy) {
  if (!node) return absl::OkStatus();
  if (auto status = reader.ExpectMap(
          node, "network.state",
          {"fail_after", "training_fail_after", "recovery_window", "rate_degraded"});
      !status.ok()) {
    return status;
  }
  const std::pair<const char*, absl::Duration*> windows[] = {
      {"fail_after", &policy->fail_after},
      {"training_fail_after", &policy->training_fail_after},
      {"recovery_window", &policy->recovery_window}};
  for (const auto& [key, target] : windows) {
    if (auto status = ReadInterval(reader, node[key], fmt::format("network.state.{}", key),
                                   absl::ZeroDuration(), absl::Hours(24), target);
        !status.ok()) {
      return status;
    }
  }
  if (const YAML::Node rate = node["rate_degraded"]) {
    auto text = reader.String(rate, "network.state.rate_degraded");
    if (!text.ok()) return text.status();
    if (*text != "true" && *text != "false") {
      return reader.Error(rate, "network.state.rate_degraded", "expected true or false");
    }
    policy->rate_degraded = *text == "true";
  }
  return absl::OkStatus();
}

// One entry of network.counters: a change of a built-in rule, a new rule, or `off`.
absl::Status ApplyCounterRule(const yaml::Reader& reader, const std::string& name,
                              const YAML::Node& node, NetworkPolicy* policy) {
  const std::string path = "network.counters." + name;
  auto existing = std::find_if(policy->counters.begin(), policy->counters.end(),
                               [&](const NetworkCounterRule& rule) { return rule.name == name; });
  if (node.IsScalar() && node.Scalar() == "off") {
    if (existing == policy->counters.end()) {
      return reader.Error(node, path, "no such rule to turn off (a new rule needs its counter)");
    }
    policy->counters.erase(existing);
    return absl::OkStatus();
  }
  if (auto status = reader.ExpectMap(
          node, path,
          {"counter", "over", "per", "status", "code", "meaning", "action", "recommended"});
      !status.ok()) {
    return status;
  }
  NetworkCounterRule rule;
  if (existing != policy->counters.end()) {
    rule = *existing;
  } else {
    if (!node["counter"] || !node["over"] || !node["per"]) {
      return reader.Error(node, path,
                          "a new rule needs counter, over and per (built-in rules: "
                          "symbol_error_ber, link_downed, ...; see docs/health.md)");
    }
    rule.name = name;
    rule.code = "VIGIL_FR_NET_COUNTER";
    rule.action = std::string(kCable);
    rule.source = "the engine config";
  }
  const std::pair<const char*, std::string*> texts[] = {{"counter", &rule.counter},
                                                        {"code", &rule.code},
                                                        {"meaning", &rule.meaning},
                                                        {"action", &rule.action}};
  for (const auto& [key, target] : texts) {
    if (!node[key]) continue;
    auto text = reader.String(node[key], path + "." + key);
    if (!text.ok()) return text.status();
    if (text->empty()) return reader.Error(node[key], path + "." + key, "must not be empty");
    *target = *text;
  }
  if (node["over"]) {
    auto over = reader.Double(node["over"], path + ".over");
    if (!over.ok()) return over.status();
    if (*over < 0) return reader.Error(node["over"], path + ".over", "must not be negative");
    rule.over = *over;
  }
  if (auto status = ReadInterval(reader, node["per"], path + ".per", absl::Seconds(1),
                                 absl::Hours(24), &rule.per);
      !status.ok()) {
    return status;
  }
  if (node["status"]) {
    auto status = reader.String(node["status"], path + ".status");
    if (!status.ok()) return status.status();
    if (*status != "WARN" && *status != "FAIL") {
      return reader.Error(node["status"], path + ".status", "expected WARN or FAIL");
    }
    rule.status = *status == "FAIL" ? HealthStatus::kFail : HealthStatus::kWarn;
  }
  if (node["recommended"]) {
    auto recommended = ParseRecommended(reader, node["recommended"], path + ".recommended");
    if (!recommended.ok()) return recommended.status();
    rule.recommended = *recommended;
  }
  if (existing != policy->counters.end()) {
    *existing = std::move(rule);
  } else {
    policy->counters.push_back(std::move(rule));
  }
  return absl::OkStatus();
}

}  // namespace

NetworkPolicy DefaultNetworkPolicy() {
  NetworkPolicy policy;
  const absl::Duration second = absl::Seconds(1), minute = absl::Minutes(1), hour = absl::Hours(1);
  using enum HealthStatus;
  policy.counters = {
      // The IBTA's bit error rate bound (10^-12) at the lane rates of HDR/NDR: past 120 symbol
      // errors an hour the link is out of spec.
      Counter("symbol_error_ber", "symbol_error", 120, hour, kFail, "VIGIL_FR_NET_SYMBOL_ERRORS",
              "symbol errors past the IBTA bit error rate bound (10^-12): the link is out of spec"),
      Counter("symbol_error_burst", "symbol_error", 10, second, kWarn, "VIGIL_FR_NET_SYMBOL_ERRORS",
              "a burst of symbol errors"),
      // The port training state machine failed: the link went down (the peers' flap count).
      Counter("link_downed", "link_downed", 0, hour, kWarn, "VIGIL_FR_NET_LINK_DOWNED",
              "the link went down (its training state machine failed): queue pairs disconnected"),
      Counter("link_downed_repeated", "link_downed", 2, hour, kFail, "VIGIL_FR_NET_LINK_DOWNED",
              "the link keeps going down"),
      Counter("link_error_recovery", "link_error_recovery", 5, minute, kWarn,
              "VIGIL_FR_NET_LINK_ERROR_RECOVERY",
              "the link keeps retraining (link error recovery) to stay up"),
      Counter("rcv_errors", "port_rcv_errors", 10, second, kWarn, "VIGIL_FR_NET_RCV_ERRORS",
              "packets received with errors"),
      Counter("local_link_integrity", "local_link_integrity_errors", 0, hour, kFail,
              "VIGIL_FR_NET_LINK_INTEGRITY",
              "local physical errors past the port's threshold (local link integrity)"),
      Counter("buffer_overrun", "excessive_buffer_overrun_errors", 0, hour, kFail,
              "VIGIL_FR_NET_BUFFER_OVERRUN",
              "consecutive flow-control overruns of the receive buffer"),
      Counter("xmit_discards", "port_xmit_discards", 100, second, kWarn,
              "VIGIL_FR_NET_XMIT_DISCARDS", "outbound packets discarded (the port is congested)"),
  };
  // link_downed: NVSentinel fails on any increase; Vigil warns on one and fails on the third in
  // an hour, gpud's flap threshold (defaultIbPortFlapBackToActiveThreshold = 3).
  for (NetworkCounterRule& rule : policy.counters) {
    if (rule.counter == "link_downed") {
      rule.source = "leptonai/gpud's flap threshold (3 downs); NVSentinel fails on any link_downed";
    }
  }
  return policy;
}

absl::Status ApplyNetworkConfig(const YAML::Node& node, const std::string& source,
                                NetworkPolicy* policy) {
  const yaml::Reader reader(source);
  if (auto status = reader.ExpectMap(
          node, "network", {"state_interval", "counter_interval", "ports", "state", "counters"});
      !status.ok()) {
    return status;
  }
  if (auto status =
          ReadInterval(reader, node["state_interval"], "network.state_interval",
                       absl::Milliseconds(100), absl::Minutes(1), &policy->state_interval);
      !status.ok()) {
    return status;
  }
  if (auto status = ReadInterval(reader, node["counter_interval"], "network.counter_interval",
                                 absl::Seconds(1), absl::Hours(1), &policy->counter_interval);
      !status.ok()) {
    return status;
  }
  if (auto status = ApplyPorts(reader, node["ports"], policy); !status.ok()) return status;
  if (auto status = ApplyState(reader, node["state"], policy); !status.ok()) return status;
  if (const YAML::Node counters = node["counters"]) {
    if (!counters.IsMap()) {
      return reader.Error(counters, "network.counters", "expected a mapping of rules by name");
    }
    for (const auto& entry : counters) {
      if (auto status = ApplyCounterRule(reader, entry.first.Scalar(), entry.second, policy);
          !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace vigil
