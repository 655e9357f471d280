// Implements the report's JSON.
#include "drill/report.h"

#include "api/convert.h"

namespace vigil::drill {

std::string_view OutcomeName(DrillReport::Outcome outcome) {
  switch (outcome) {
    case DrillReport::Outcome::kPassed:
      return "passed";
    case DrillReport::Outcome::kStageFailed:
      return "stage_failed";
    case DrillReport::Outcome::kRefused:
      return "refused";
    case DrillReport::Outcome::kError:
      return "error";
  }
  return "error";
}

nlohmann::json ReportJson(const DrillReport& report) {
  nlohmann::json json = {
      {"outcome", std::string(OutcomeName(report.outcome))},
      {"exit_code", ExitCode(report)},
      {"fault", report.fault},
      {"injection", report.injection_id},
      {"problems", report.problems},
      {"notes", report.notes},
      {"target",
       {{"node", report.target.node},
        {"instance_id", report.target.instance_id},
        {"gpu", report.target.gpu},
        {"uuid", report.target.uuid},
        {"baseline", std::string(HealthStatusText(report.target.baseline))},
        {"fault_status", report.target.fault == v1::HEALTH_STATUS_UNSPECIFIED
                             ? ""
                             : std::string(HealthStatusText(report.target.fault))}}},
      {"stages", nlohmann::json::array()},
  };
  for (const StageReport& stage : report.stages) {
    nlohmann::json row = {
        {"stage", std::string(StageName(stage.stage))},
        {"phase", stage.phase == Want::kFault ? "fault" : "recovery"},
        {"result", std::string(ResultName(stage.result))},
        {"deadline_ms", absl::ToInt64Milliseconds(stage.deadline)},
        {"link", stage.link},
        {"detail", stage.detail},
    };
    row["seen_after_ms"] =
        stage.seen_after ? nlohmann::json(absl::ToInt64Milliseconds(*stage.seen_after)) : nullptr;
    if (!stage.instance_id.empty()) row["instance_id"] = stage.instance_id;
    if (stage.seq != 0) row["seq"] = stage.seq;
    json["stages"].push_back(std::move(row));
  }
  return json;
}

}  // namespace vigil::drill
