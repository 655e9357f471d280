// The drill's report as JSON (`vigil drill --json`): the outcome, the target, and every stage
// the way there and back with its latency, engine (instance_id, seq), deadline and result.
// Pure; thread-safe.
#pragma once

#include "drill/drill.h"
#include "nlohmann/json.hpp"

namespace vigil::drill {

nlohmann::json ReportJson(const DrillReport& report);
std::string_view OutcomeName(DrillReport::Outcome outcome);  // "passed", "stage_failed", ...

}  // namespace vigil::drill
