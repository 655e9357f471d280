// `vigil drill`: proves the alerting chain end to end. It checks every named link first
// (preflight: nothing is injected when one is wrong), injects the fault into this node's engine,
// watches every link at once for it — recording when each first showed it and at which engine
// (instance_id, seq) — then cleans up and follows the way back. A client of the engine; it never
// embeds one.
//
// Threading: Run() on the caller's thread; the links it is given may run threads of their own
// (EngineLink). Time from the injected clock: the polls wait on it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/engine_client.h"
#include "common/clock.h"
#include "drill/link.h"
#include "drill/plan.h"

namespace vigil::drill {

struct StageReport {
  enum class Result : uint8_t { kPass, kFail, kSkip, kPending };
  Stage stage = Stage::kEngine;
  Want phase = Want::kFault;  // the way there, or the way back
  Result result = Result::kSkip;
  std::optional<absl::Duration> seen_after;  // since the injection (or the cleanup)
  std::string instance_id;
  uint64_t seq = 0;
  absl::Duration deadline;
  std::string link;    // the link's name ("the exporter at …"); "" when not named
  std::string detail;  // what it showed, or why it failed or is pending
};
std::string_view ResultName(StageReport::Result result);  // "PASS", "FAIL", "SKIP", "PENDING"

struct DrillReport {
  enum class Outcome : uint8_t {
    kPassed,       // every named stage passed
    kStageFailed,  // a stage did not show the fault (or its end) in time
    kRefused,      // preflight: nothing was injected
    kError,        // the engine could not be reached or refused the injection
  };
  Outcome outcome = Outcome::kError;
  std::vector<std::string> problems;  // preflight failures and errors, one line each
  Target target;
  std::string fault;                // Fault::Describe()
  std::string injection_id;         // "inj-4", "scn-2"
  std::vector<StageReport> stages;  // every stage the way there, then the way back
  std::vector<std::string> notes;   // what the report does not show in its rows
};
// 0 passed, 1 a stage failed, 2 refused or an error.
int ExitCode(const DrillReport& report);

class Drill {
 public:
  // `engine` (not owned) outlives the drill; `links` hold one link per stage in the plan's
  // deadlines, the engine's (EngineLink) included; `clock` (not owned) times the polls.
  Drill(DrillPlan plan, EngineClient* engine, std::vector<std::unique_ptr<Link>> links,
        Clock* clock);
  DrillReport Run();

 private:
  bool Preflight(DrillReport* report);
  bool Inject(DrillReport* report, Mark* mark, absl::Time* engine_time);
  // Looks at every stage of `stages` until each showed `want` or passed its deadline.
  void Watch(Want want, const Mark& since, std::optional<absl::Time> engine_since,
             std::vector<StageReport*> stages, DrillReport* report);
  // Ends the injection and clears the GPU's drill incidents; *mark is when.
  void CleanUp(DrillReport* report, const Mark& injected, Mark* mark);
  Link* LinkFor(Stage stage) const;
  absl::StatusOr<uint64_t> EngineSeq();

  const DrillPlan plan_;
  EngineClient* const engine_;
  const std::vector<std::unique_ptr<Link>> links_;
  Clock* const clock_;
};

}  // namespace vigil::drill
