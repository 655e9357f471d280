// What a drill does: the fault it injects into the node's engine, the links of the alerting chain
// it watches for that fault, and how long each may take. Plain value types and pure functions;
// thread-safe to read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fields/catalogue.h"

namespace vigil::drill {

// The links of the chain, in the order a fault travels along it.
enum class Stage : uint8_t {
  kEngine,         // the engine's verdict (WatchHealth)
  kExporter,       // the exporter's health (and XID) series
  kHealthcheck,    // the health check's /status
  kNodeCondition,  // the node's GpuProblem condition (Kubernetes)
  kTaint,          // the health check's NoSchedule taint (Kubernetes)
  // Where the health check quarantines the GPU, not the node (its DRA devices): the GPU's
  // DeviceTaintRule, the node untainted. A drill names this stage or kTaint, never both.
  kDeviceQuarantine,
  kAlert,         // a Prometheus alert firing
  kAlertmanager,  // Alertmanager holding it
  kQuarantine,    // the remediator took the node on (Kubernetes, --remediation)
  kDrain,         // ... drained it
  kRecovery,      // ... recovered it (the GPU reset, the node rebooted)
};
inline constexpr Stage kAllStages[] = {
    Stage::kEngine,        Stage::kExporter,     Stage::kHealthcheck,
    Stage::kNodeCondition, Stage::kTaint,        Stage::kDeviceQuarantine,
    Stage::kAlert,         Stage::kAlertmanager, Stage::kQuarantine,
    Stage::kDrain,         Stage::kRecovery};
// The remediator's steps, followed with --remediation.
inline constexpr Stage kRemediationStages[] = {Stage::kQuarantine, Stage::kDrain, Stage::kRecovery};
inline constexpr bool IsRemediationStage(Stage stage) {
  return stage == Stage::kQuarantine || stage == Stage::kDrain || stage == Stage::kRecovery;
}
// The health check's quarantine, of the node (the taint) or of the GPU (its DeviceTaintRule):
// its way back follows the health check's hysteresis.
inline constexpr bool IsQuarantineStage(Stage stage) {
  return stage == Stage::kTaint || stage == Stage::kDeviceQuarantine;
}
// "engine", "exporter", "healthcheck", "node-condition", "taint", "device-quarantine", "alert",
// "alertmanager", "quarantine", "drain", "recovery".
std::string_view StageName(Stage stage);
std::optional<Stage> ParseStage(std::string_view name);
// "engine, exporter, ... or alertmanager", for messages that list the choices.
std::string StageChoices();

// The fault a drill injects.
struct Fault {
  enum class Kind : uint8_t { kXid, kField, kScenario };
  Kind kind = Kind::kXid;
  uint32_t gpu = 0;                  // the GPU whose verdict the drill follows
  uint32_t xid = 0;                  // kXid
  const FieldInfo* field = nullptr;  // kField
  double value = 0;                  // kField
  std::string scenario_yaml;         // kScenario: the file's text
  std::string scenario_source;       // kScenario: its name, for the engine's messages
  // Let automatic actions (the taint) follow the fault; without it they are only reported.
  bool allow_actions = false;
  std::string Describe() const;  // "XID 79 on GPU 2", "DCGM_FI_DEV_GPU_TEMP=95 on GPU 1", ...
};

struct DrillPlan {
  Fault fault;
  // The stages to prove, each with its deadline from the injection (and, on the way back, from
  // the cleanup). The engine stage is always there; a stage not listed is SKIP.
  std::map<Stage, absl::Duration> deadlines;
  // The alerts expected to fire; empty: any alert whose labels name this node and GPU.
  std::vector<std::string> alerts;
  bool cleanup = true;         // clear the injection and the GPU's drill incidents afterwards
  bool wait_recovery = false;  // follow the taint's removal and the alerts' resolution to the end
  bool force = false;          // drill on a node that is already quarantined
  // The health check's --untaint-after, where it says (its /status): how long the taint's way
  // back takes.
  std::optional<absl::Duration> untaint_after;
  absl::Duration poll_interval = absl::Milliseconds(250);
};

// The default deadline of a stage when the drill's is `deadline`: the alert stages get on top
// what the shipped rules add — `for: 1m` on VigilGpuHealthFail, then Alertmanager's group_wait.
absl::Duration DefaultDeadline(Stage stage, absl::Duration deadline);
// "STAGE=DURATION" (e.g. "alert=5m"); the error says what is wrong.
absl::StatusOr<std::pair<Stage, absl::Duration>> ParseStageDeadline(std::string_view text);

}  // namespace vigil::drill
