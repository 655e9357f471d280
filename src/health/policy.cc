// The built-in health policy and its config overrides.
//
// XID facts follow NVIDIA's XID catalogue and how the field treats the codes (shared notes,
// reference.md): 13, 31, 43, 45 (and 68, 109, which the Kubernetes device plugin also ignores)
// are the application's problem, not the node's — treating 45 as fatal once produced hundreds of
// false fatal events on a fleet. 48, 64, 74, 79, 95, 119, 120, 140 need a GPU reset or a node
// restart. 94 is a contained ECC error (restart the application). 63 and 92 record row remapping
// and high single-bit error rates; tools disagree on them, so they are counted and warn only when
// they repeat. 154 announces a recovery-action change, which the driver system reads from field
// 1523 itself. Codes not in the table warn (not fail: an unknown code is not evidence of a dead
// GPU, but it deserves a look).
//
// SXids (NVSwitch errors) follow the driver's own word, as DCGM's NVSwitch watches do (fatal and
// non-fatal): a fatal SXid stops the fabric traffic of the GPUs behind the switch until the
// switch and its GPUs are reset (fabric manager) or the node reboots, so it FAILs; the rest warn.
#include "health/policy.h"

#include "common/status.h"
#include "common/strings.h"
#include "common/yaml.h"
#include "fmt/format.h"

namespace vigil {
namespace {

using Severity = XidRule::Severity;

XidRule Rule(Severity severity, HealthSystem system, std::string code, std::string meaning,
             std::string action, uint32_t count = 1, absl::Duration window = absl::Hours(1)) {
  return XidRule{severity,           system,           count, window, std::move(code),
                 std::move(meaning), std::move(action)};
}

enum class CodeKind { kXid, kSxid };

// Applies `health.xid` or `health.sxid`: per code, overrides of the rule it has now.
absl::Status ApplyCodeRules(const yaml::Reader& reader, const YAML::Node& rules, CodeKind kind,
                            HealthPolicy* policy) {
  if (!rules) return absl::OkStatus();
  const bool xid = kind == CodeKind::kXid;
  const std::string section = xid ? "health.xid" : "health.sxid";
  const char* const noun = xid ? "XID" : "SXid";
  const uint64_t max_code = xid ? 999 : 99'999;
  if (!rules.IsMap()) {
    return reader.Error(rules, section, fmt::format("expected a mapping of {} codes", noun));
  }
  std::map<uint32_t, XidRule>& table = xid ? policy->xids : policy->sxids;
  for (const auto& entry : rules) {
    const std::string key = entry.first.Scalar();
    const std::string path = section + "." + key;
    const std::optional<uint64_t> code = ParseUint64(key);
    if (!code || *code == 0 || *code > max_code) {
      return reader.Error(entry.first, path,
                          fmt::format("{} codes are numbers from 1 to {}", noun, max_code));
    }
    const YAML::Node rule_node = entry.second;
    if (auto status = xid ? reader.ExpectMap(rule_node, path,
                                             {"severity", "system", "count", "window", "action",
                                              "meaning", "recommended"})
                          : reader.ExpectMap(rule_node, path,
                                             {"severity", "count", "window", "action", "meaning",
                                              "recommended"});
        !status.ok()) {
      return status;
    }
    std::optional<Severity> severity;
    if (rule_node["severity"]) {
      auto severity_name = reader.String(rule_node["severity"], path + ".severity");
      if (!severity_name.ok()) return severity_name.status();
      for (Severity known :
           {Severity::kIgnore, Severity::kWarn, Severity::kFail, Severity::kCount}) {
        if (XidSeverityName(known) == *severity_name) severity = known;
      }
      if (!severity) {
        return reader.Error(rule_node["severity"], path + ".severity",
                            "use ignore, warn, fail or count");
      }
    } else if (!xid) {
      // Without it the rule would silently turn the driver's "Fatal" into a warning.
      return reader.Error(rule_node, path + ".severity",
                          "required: an SXid rule sets the code's severity (fail, warn, count or "
                          "ignore); codes not listed follow the driver's word");
    }
    // An SXid rule starts from the built-in texts of its severity.
    XidRule rule = xid ? policy->RuleFor(static_cast<uint32_t>(*code))
                       : policy->SxidRuleFor(static_cast<uint32_t>(*code),
                                             /*fatal=*/*severity == Severity::kFail);
    if (severity) rule.severity = *severity;
    if (rule_node["system"]) {
      auto name = reader.String(rule_node["system"], path + ".system");
      if (!name.ok()) return name.status();
      const auto system = ParseHealthSystem(*name);
      if (!system || IsNodeLevel(*system)) {
        return reader.Error(rule_node["system"], path + ".system", "use " + HealthSystemChoices());
      }
      rule.system = *system;
    }
    if (rule_node["count"]) {
      auto count = reader.Int(rule_node["count"], path + ".count");
      if (!count.ok()) return count.status();
      if (*count < 1 || *count > 1'000'000) {
        return reader.Error(rule_node["count"], path + ".count", "out of range (1 .. 1000000)");
      }
      rule.count = static_cast<uint32_t>(*count);
    }
    if (rule_node["window"]) {
      auto window = reader.Duration(rule_node["window"], path + ".window");
      if (!window.ok()) return window.status();
      if (*window < absl::Seconds(1) || *window > absl::Hours(24 * 7)) {
        return reader.Error(rule_node["window"], path + ".window", "out of range (1s .. 168h)");
      }
      rule.window = *window;
    }
    if (rule_node["action"]) {
      auto action = reader.String(rule_node["action"], path + ".action");
      if (!action.ok()) return action.status();
      rule.action = *action;
    }
    if (rule_node["meaning"]) {
      auto meaning = reader.String(rule_node["meaning"], path + ".meaning");
      if (!meaning.ok()) return meaning.status();
      if (meaning->empty()) {
        return reader.Error(rule_node["meaning"], path + ".meaning",
                            "must not be empty: leave it out to keep the built-in text");
      }
      rule.meaning = *meaning;
    } else if (xid && (rule.meaning.empty() || !table.contains(static_cast<uint32_t>(*code)))) {
      // (An SXid rule keeps its severity's built-in meaning: the driver's words say the rest.)
      rule.meaning = fmt::format("{} {} (configured)", noun, *code);
    }
    if (rule_node["recommended"]) {
      auto recommended = ParseRecommended(reader, rule_node["recommended"], path + ".recommended");
      if (!recommended.ok()) return recommended.status();
      rule.recommended = *recommended;
    }
    table[static_cast<uint32_t>(*code)] = rule;
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kPass:
      return "PASS";
    case HealthStatus::kWarn:
      return "WARN";
    case HealthStatus::kUnknown:
      return "UNKNOWN";
    case HealthStatus::kFail:
      return "FAIL";
  }
  return "UNKNOWN";
}

HealthStatus Worst(HealthStatus a, HealthStatus b) { return a > b ? a : b; }

std::string_view XidSeverityName(XidRule::Severity severity) {
  switch (severity) {
    case Severity::kIgnore:
      return "ignore";
    case Severity::kWarn:
      return "warn";
    case Severity::kFail:
      return "fail";
    case Severity::kCount:
      return "count";
  }
  return "warn";
}

const XidRule& HealthPolicy::RuleFor(uint32_t xid) const {
  auto it = xids.find(xid);
  return it != xids.end() ? it->second : unknown_xid;
}

std::string_view RecommendedActionName(RecommendedAction action) {
  switch (action) {
    case RecommendedAction::kNone:
      return "none";
    case RecommendedAction::kRestartApp:
      return "restart-app";
    case RecommendedAction::kResetGpu:
      return "reset-gpu";
    case RecommendedAction::kReboot:
      return "reboot";
    case RecommendedAction::kInspect:
      return "inspect";
  }
  return "inspect";
}

absl::StatusOr<RecommendedAction> ParseRecommended(const yaml::Reader& reader,
                                                   const YAML::Node& node,
                                                   const std::string& path) {
  auto name = reader.String(node, path);
  if (!name.ok()) return name.status();
  const std::optional<RecommendedAction> action = ParseRecommendedAction(*name);
  if (!action)
    return reader.Error(node, path, "use none, restart-app, reset-gpu, reboot or inspect");
  return *action;
}

std::optional<RecommendedAction> ParseRecommendedAction(std::string_view name) {
  for (RecommendedAction action :
       {RecommendedAction::kNone, RecommendedAction::kRestartApp, RecommendedAction::kResetGpu,
        RecommendedAction::kReboot, RecommendedAction::kInspect}) {
    if (RecommendedActionName(action) == name) return action;
  }
  return std::nullopt;
}

RecommendedAction HealthPolicy::RecommendedFor(const std::string& key,
                                               RecommendedAction rule_default) const {
  auto it = recommended.find(key);
  return it != recommended.end() ? it->second : rule_default;
}

const XidRule& HealthPolicy::SxidRuleFor(uint32_t sxid, bool fatal) const {
  auto it = sxids.find(sxid);
  return it != sxids.end() ? it->second : fatal ? fatal_sxid : nonfatal_sxid;
}

HealthPolicy DefaultHealthPolicy() {
  HealthPolicy policy;
  const auto app = [](std::string meaning) {
    return Rule(Severity::kIgnore, HealthSystem::kDriver, "DCGM_FR_XID_ERROR", std::move(meaning),
                "none for the node: the application hit the error; restart it if it did not "
                "recover");
  };
  const std::string reset =
      "drain the node's workloads and reset the GPU (nvidia-smi -r), or "
      "reboot the node";
  auto& x = policy.xids;
  x[13] = app("graphics engine exception (usually an application bug)");
  x[31] = app("GPU memory page fault (usually an application bug)");
  x[43] = app("GPU stopped processing (the application's context was torn down)");
  x[45] = app("preemptive cleanup, due to a previous error (follows other errors)");
  x[68] = app("video decoder exception");
  x[109] = app("context switch timeout (the application's context was reset)");
  x[48] = Rule(Severity::kFail, HealthSystem::kMemory, "DCGM_FR_VOLATILE_DBE_DETECTED",
               "double-bit ECC error", reset);
  x[63] = Rule(Severity::kCount, HealthSystem::kMemory, "DCGM_FR_XID_ERROR",
               "ECC page retirement or row remapping recorded",
               "watch the row-remap counters; reset the GPU at the next maintenance window so "
               "pending remaps take effect",
               4, absl::Hours(1));
  x[64] = Rule(Severity::kFail, HealthSystem::kMemory, "DCGM_FR_ROW_REMAP_FAILURE",
               "ECC page retirement or row remapping failed", reset);
  x[74] =
      Rule(Severity::kFail, HealthSystem::kNvlink, "DCGM_FR_NVLINK_ERROR_CRITICAL", "NVLink error",
           "check the NVLink counters (nvidia-smi nvlink -e), drain the node and reset the "
           "GPUs of the NVLink domain; replace the part if it recurs");
  x[79] = Rule(Severity::kFail, HealthSystem::kDriver, "DCGM_FR_FALLEN_OFF_BUS",
               "GPU has fallen off the bus",
               "drain the node and restart it (bare metal); check the GPU's seating, power and "
               "PCIe link if it recurs");
  x[92] = Rule(Severity::kCount, HealthSystem::kMemory, "DCGM_FR_XID_ERROR",
               "high single-bit ECC error rate",
               "watch the ECC counters; plan a GPU reset or replacement if the rate persists", 4,
               absl::Hours(1));
  x[94] = Rule(Severity::kWarn, HealthSystem::kMemory, "DCGM_FR_CONTAINED_ERROR",
               "contained ECC error (the affected application was terminated)",
               "restart the affected application; reset the GPU at the next maintenance window");
  x[95] = Rule(Severity::kFail, HealthSystem::kMemory, "DCGM_FR_UNCONTAINED_ERROR",
               "uncontained ECC error", reset);
  x[119] =
      Rule(Severity::kFail, HealthSystem::kDriver, "DCGM_FR_XID_ERROR", "GSP RPC timeout", reset);
  x[120] = Rule(Severity::kFail, HealthSystem::kDriver, "DCGM_FR_XID_ERROR", "GSP error", reset);
  x[140] = Rule(Severity::kFail, HealthSystem::kMemory, "DCGM_FR_UNCONTAINED_ERROR",
                "unrecovered ECC error", reset);
  x[154] = Rule(Severity::kIgnore, HealthSystem::kDriver, "DCGM_FR_XID_ERROR",
                "GPU recovery action changed (read from DCGM_FI_DEV_GPU_RECOVERY_ACTION)",
                "see the driver system's recovery-action incident");
  for (uint32_t code : {38u, 39u, 42u}) {
    x[code] =
        Rule(Severity::kWarn, HealthSystem::kPcie, "DCGM_FR_XID_ERROR",
             "PCIe bus or driver firmware error",
             "check the PCIe link (lspci -vv, replay counter); reseat or replace if it recurs");
  }
  for (uint32_t code : {60u, 61u, 62u}) {
    x[code] = Rule(Severity::kWarn, HealthSystem::kThermal, "DCGM_FR_XID_ERROR",
                   "internal micro-controller error (thermal/clock management)",
                   "check cooling and temperatures; reset the GPU if it recurs");
  }
  for (uint32_t code : {54u, 56u, 57u, 58u, 78u}) {
    x[code] = Rule(Severity::kWarn, HealthSystem::kPower, "DCGM_FR_XID_ERROR",
                   "power or display engine error", "check the GPU's power supply and cabling");
  }
  for (uint32_t code : {121u, 137u}) {
    x[code] =
        Rule(Severity::kWarn, HealthSystem::kNvlink, "DCGM_FR_XID_ERROR", "NVLink/C2C link error",
             "check the NVLink counters; reset the GPU if it recurs");
  }
  // What each code asks for, machine-readable (the rest, and unknown codes: inspect): the
  // application's errors restart the application, the GPU's own resets it, a GPU off the bus
  // needs the node restarted, the counted ones and 154 need nothing by themselves.
  const std::pair<std::vector<uint32_t>, RecommendedAction> recommended[] = {
      {{13, 31, 43, 45, 68, 94, 109}, RecommendedAction::kRestartApp},
      {{48, 74, 95, 119, 120, 140}, RecommendedAction::kResetGpu},
      {{79}, RecommendedAction::kReboot},
      {{63, 92, 154}, RecommendedAction::kNone},
  };
  for (const auto& [codes, action] : recommended) {
    for (uint32_t code : codes) x.at(code).recommended = action;
  }
  policy.unknown_xid = Rule(Severity::kWarn, HealthSystem::kDriver, "DCGM_FR_XID_ERROR",
                            "an XID this policy does not know",
                            "look the code up in NVIDIA's XID catalogue and add it to "
                            "health.xid in the engine config");
  policy.fatal_sxid =
      Rule(Severity::kFail, HealthSystem::kNvswitch, "DCGM_FR_NVSWITCH_FATAL_ERROR",
           "fatal NVSwitch error",
           "drain the node: the GPUs behind the switch lost their NVLink fabric; reset the "
           "NVSwitches and GPUs (fabric manager) or reboot the node; inspect the link or the "
           "switch tray if it recurs");
  policy.nonfatal_sxid = Rule(Severity::kWarn, HealthSystem::kNvswitch,
                              "DCGM_FR_NVSWITCH_NON_FATAL_ERROR", "non-fatal NVSwitch error",
                              "watch the switch's SXid rate; inspect the link if it recurs");
  policy.fatal_sxid.recommended = RecommendedAction::kReboot;
  policy.nonfatal_sxid.recommended = RecommendedAction::kNone;
  return policy;
}

absl::Status ApplyHealthConfig(const YAML::Node& node, const std::string& source,
                               HealthPolicy* policy) {
  const yaml::Reader reader(source);
  if (auto status =
          reader.ExpectMap(node, "health",
                           {"window", "power_violation_fraction", "thermal_violation_fraction",
                            "nvlink_crc_warn_count", "nvlink_crc_fail_rate", "stale_intervals",
                            "xid", "sxid", "recommended"});
      !status.ok()) {
    return status;
  }
  if (node["window"]) {
    auto window = reader.Duration(node["window"], "health.window");
    if (!window.ok()) return window.status();
    if (*window < absl::Seconds(10) || *window > absl::Hours(1)) {
      return reader.Error(node["window"], "health.window", "out of range (10s .. 1h)");
    }
    policy->window = *window;
  }
  const std::pair<const char*, double*> fractions[] = {
      {"power_violation_fraction", &policy->power_violation_fraction},
      {"thermal_violation_fraction", &policy->thermal_violation_fraction},
      {"nvlink_crc_fail_rate", &policy->nvlink_crc_fail_rate},
      {"stale_intervals", &policy->stale_intervals}};
  for (const auto& [key, target] : fractions) {
    if (!node[key]) continue;
    auto value = reader.Double(node[key], fmt::format("health.{}", key));
    if (!value.ok()) return value.status();
    const bool fraction = std::string_view(key).ends_with("fraction");
    if (*value < 0 || (fraction && *value > 1) || (!fraction && *value <= 0)) {
      return reader.Error(node[key], fmt::format("health.{}", key),
                          fraction ? "must be between 0 and 1" : "must be positive");
    }
    *target = *value;
  }
  if (node["nvlink_crc_warn_count"]) {
    auto count = reader.Int(node["nvlink_crc_warn_count"], "health.nvlink_crc_warn_count");
    if (!count.ok()) return count.status();
    if (*count < 1)
      return reader.Error(node["nvlink_crc_warn_count"], "health.nvlink_crc_warn_count",
                          "must be at least 1");
    policy->nvlink_crc_warn_count = *count;
  }
  // The DCGM rules' recommended actions, by incident key: "SYSTEM.NAME" of a GPU system.
  if (const YAML::Node overrides = node["recommended"]) {
    if (!overrides.IsMap()) {
      return reader.Error(overrides, "health.recommended",
                          "expected a mapping of incident keys (e.g. memory.volatile_dbe)");
    }
    for (const auto& entry : overrides) {
      const std::string key = entry.first.Scalar();
      const std::string path = "health.recommended." + key;
      const size_t dot = key.find('.');
      const auto system = ParseHealthSystem(key.substr(0, dot));
      if (dot == std::string::npos || dot + 1 == key.size() || !system || IsNodeLevel(*system) ||
          key.find('.', dot + 1) != std::string::npos) {
        return reader.Error(entry.first, path,
                            "an incident key is SYSTEM.NAME, e.g. memory.volatile_dbe (XIDs "
                            "and SXids take theirs in health.xid / health.sxid)");
      }
      auto action = ParseRecommended(reader, entry.second, path);
      if (!action.ok()) return action.status();
      policy->recommended[key] = *action;
    }
  }
  if (absl::Status status = ApplyCodeRules(reader, node["xid"], CodeKind::kXid, policy);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = ApplyCodeRules(reader, node["sxid"], CodeKind::kSxid, policy);
      !status.ok()) {
    return status;
  }
  return absl::OkStatus();
}

}  // namespace vigil
