// Implements the drill plan's names and parsing.
#include "drill/plan.h"

#include "common/duration.h"
#include "common/status.h"
#include "fmt/format.h"

namespace vigil::drill {

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kEngine:
      return "engine";
    case Stage::kExporter:
      return "exporter";
    case Stage::kHealthcheck:
      return "healthcheck";
    case Stage::kNodeCondition:
      return "node-condition";
    case Stage::kTaint:
      return "taint";
    case Stage::kDeviceQuarantine:
      return "device-quarantine";
    case Stage::kAlert:
      return "alert";
    case Stage::kAlertmanager:
      return "alertmanager";
    case Stage::kQuarantine:
      return "quarantine";
    case Stage::kDrain:
      return "drain";
    case Stage::kRecovery:
      return "recovery";
  }
  return "unknown";
}

std::optional<Stage> ParseStage(std::string_view name) {
  for (Stage stage : kAllStages) {
    if (StageName(stage) == name) return stage;
  }
  return std::nullopt;
}

std::string StageChoices() {
  std::string out;
  for (size_t i = 0; i < std::size(kAllStages); ++i) {
    if (i > 0) out += i + 1 == std::size(kAllStages) ? " or " : ", ";
    out += StageName(kAllStages[i]);
  }
  return out;
}

std::string Fault::Describe() const {
  switch (kind) {
    case Kind::kXid:
      return fmt::format("XID {} on GPU {}", xid, gpu);
    case Kind::kField:
      return fmt::format("{}={} on GPU {}", field != nullptr ? field->name : "?", value, gpu);
    case Kind::kScenario:
      return fmt::format("scenario {} (following GPU {})", scenario_source, gpu);
  }
  return "?";
}

absl::Duration DefaultDeadline(Stage stage, absl::Duration deadline) {
  switch (stage) {
    case Stage::kAlert:
      return deadline + absl::Minutes(1);
    case Stage::kAlertmanager:
      return deadline + absl::Seconds(90);
    case Stage::kDrain:
    case Stage::kRecovery:
      // The remediator's passes, PodDisruptionBudgets, a reset command.
      return deadline + absl::Minutes(2);
    default:
      return deadline;
  }
}

absl::StatusOr<std::pair<Stage, absl::Duration>> ParseStageDeadline(std::string_view text) {
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("'{}': expected STAGE=DURATION (e.g. alert=5m)", text));
  }
  const std::optional<Stage> stage = ParseStage(text.substr(0, equals));
  if (!stage) {
    return absl::InvalidArgumentError(fmt::format("'{}': unknown stage '{}': use {}", text,
                                                  text.substr(0, equals), StageChoices()));
  }
  auto duration = ParseDuration(text.substr(equals + 1));
  if (!duration.ok()) {
    return absl::InvalidArgumentError(fmt::format("'{}': {}", text, MessageOf(duration.status())));
  }
  if (*duration <= absl::ZeroDuration() || *duration > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        fmt::format("'{}': a stage deadline is between 1s and 1h", text));
  }
  return std::make_pair(*stage, *duration);
}

}  // namespace vigil::drill
