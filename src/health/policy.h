// What counts as unhealthy: the health systems, their states, and the policy — thresholds and the
// per-XID rules — as data. Built-in defaults follow DCGM's health watches and NVIDIA's XID
// catalogue; the engine config's `health:` section overrides them (see docs/health.md).
// A plain value type; the lookups are pure and thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fields/health_systems.h"
#include "yaml-cpp/yaml.h"

namespace vigil {
namespace yaml {
class Reader;
}  // namespace yaml

// Ordered by how bad: the worst of several is the maximum, except that UNKNOWN ("cannot tell")
// loses to FAIL (something is known to be broken) and beats WARN and PASS (never report healthy
// what cannot be seen).
enum class HealthStatus : uint8_t { kPass, kWarn, kUnknown, kFail };
std::string_view HealthStatusName(HealthStatus status);  // "PASS", "WARN", "UNKNOWN", "FAIL"
HealthStatus Worst(HealthStatus a, HealthStatus b);

// What an incident asks for, machine-readable, for people and for automatic remediation: one
// per XID, SXid and DCGM rule, overridable in the config.
enum class RecommendedAction : uint8_t {
  kNone,        // nothing to do on the node (watch it)
  kRestartApp,  // the application's problem: restart it
  kResetGpu,    // drain the GPU's workloads and reset it
  kReboot,      // drain the node and reboot it
  kInspect,     // a person must look (replace a part, check cooling, cabling, firmware)
};
// "none", "restart-app", "reset-gpu", "reboot", "inspect".
std::string_view RecommendedActionName(RecommendedAction action);
std::optional<RecommendedAction> ParseRecommendedAction(std::string_view name);
// A recommended action from a config file: its name, or an error at `path` listing the choices.
absl::StatusOr<RecommendedAction> ParseRecommended(const yaml::Reader& reader,
                                                   const YAML::Node& node, const std::string& path);

// How one XID code is treated; also the rule for one NVSwitch SXid code (its system is then
// always nvswitch).
struct XidRule {
  enum class Severity { kIgnore, kWarn, kFail, kCount };
  Severity severity = Severity::kWarn;
  HealthSystem system = HealthSystem::kDriver;
  // kCount: WARN once `count` of them arrive within `window`; every severity: a WARN incident
  // expires `window` after the last occurrence.
  uint32_t count = 1;
  absl::Duration window = absl::Hours(1);
  std::string code;     // DCGM_FR_* name
  std::string meaning;  // what NVIDIA says it is
  std::string action;   // what the operator should do
  RecommendedAction recommended = RecommendedAction::kInspect;
};
std::string_view XidSeverityName(XidRule::Severity severity);

struct HealthPolicy {
  // The sliding window of counter deltas (DCGM: 60 s).
  absl::Duration window = absl::Seconds(60);
  // Power: DCGM warns on any power-violation time in the window, which fires on every brief
  // power-cap excursion of a busy GPU. Vigil warns when the GPU spent at least this fraction of
  // the window throttled for power.
  double power_violation_fraction = 0.10;
  // Thermal: fraction of the window throttled for heat (0: any, as DCGM).
  double thermal_violation_fraction = 0.0;
  // NVLink CRC errors: WARN at this many in the window, FAIL at this rate per second.
  int64_t nvlink_crc_warn_count = 1;
  double nvlink_crc_fail_rate = 100;
  // Memory (DCGM's values).
  int64_t retired_pages_fail = 63;      // SBE + DBE retired pages
  int64_t retired_dbe_pages_fail = 15;  // DBE retired pages (DCGM: with a new one this week)
  int64_t uncorrectable_rows_warn = 512;
  // A value older than this many of its sampling intervals is stale: its system is UNKNOWN.
  double stale_intervals = 3.0;
  // XID rules; codes not listed get `unknown_xid`.
  std::map<uint32_t, XidRule> xids;
  XidRule unknown_xid;

  // SXid (NVSwitch) rules by code; a code not listed gets `fatal_sxid` or `nonfatal_sxid` by
  // the driver's own word on the line ("Fatal", else "Non-fatal"/"Correctable").
  std::map<uint32_t, XidRule> sxids;
  XidRule fatal_sxid;
  XidRule nonfatal_sxid;

  // Overrides of the DCGM rules' recommended actions, by incident key ("memory.volatile_dbe").
  std::map<std::string, RecommendedAction> recommended;

  const XidRule& RuleFor(uint32_t xid) const;
  // A rule's recommended action for the incident `key`, unless the config overrides it.
  RecommendedAction RecommendedFor(const std::string& key, RecommendedAction rule_default) const;
  const XidRule& SxidRuleFor(uint32_t sxid, bool fatal) const;
};

// The built-in policy (see policy.cc for the XID table and its sources).
HealthPolicy DefaultHealthPolicy();

// Applies a config file's `health:` section to `policy`. Errors: "SOURCE:LINE: health.PATH: ...".
absl::Status ApplyHealthConfig(const YAML::Node& node, const std::string& source,
                               HealthPolicy* policy);

}  // namespace vigil
