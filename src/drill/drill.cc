// Implements the drill: preflight, injection, the watch of every link, cleanup and the way back.
#include "drill/drill.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "api/convert.h"
#include "common/check.h"
#include "common/status.h"
#include "fmt/format.h"

namespace vigil::drill {
namespace {

// Stages whose way back the health check or Prometheus times on their own clocks: shown as
// pending unless the drill is asked to wait for them. (A taint withheld has no way back.)
bool SlowWayBack(Stage stage, bool actions_allowed) {
  return ((IsQuarantineStage(stage) || IsRemediationStage(stage)) && actions_allowed) ||
         stage == Stage::kAlert || stage == Stage::kAlertmanager;
}

// How the health check's quarantine goes: `what` ("removes the taint once the node") has been
// healthy for its --untaint-after.
std::string QuarantineWayBack(std::string_view what, std::optional<absl::Duration> untaint_after) {
  return fmt::format(
      "the health check {} has been healthy for {}; --wait-recovery follows it", what,
      untaint_after.has_value()
          ? fmt::format("{} (its --untaint-after)", absl::FormatDuration(*untaint_after))
          : std::string("its --untaint-after (hysteresis)"));
}

std::string PendingWhy(Stage stage, std::optional<absl::Duration> untaint_after) {
  switch (stage) {
    case Stage::kTaint:
      return QuarantineWayBack("removes the taint once the node", untaint_after);
    case Stage::kDeviceQuarantine:
      return QuarantineWayBack("lifts the GPU's DeviceTaintRule once the GPU", untaint_after);
    case Stage::kAlert:
      return "the alert resolves at Prometheus' next rule evaluation after the series return; "
             "--wait-recovery follows it";
    case Stage::kAlertmanager:
      return "Alertmanager resolves the alert once Prometheus sends the resolution; "
             "--wait-recovery follows it";
    case Stage::kQuarantine:
    case Stage::kDrain:
    case Stage::kRecovery:
      return "the remediator hands the node back once PASS has held for its --untaint-after; "
             "--wait-recovery follows it";
    default:
      return "";
  }
}

}  // namespace

std::string_view ResultName(StageReport::Result result) {
  switch (result) {
    case StageReport::Result::kPass:
      return "PASS";
    case StageReport::Result::kFail:
      return "FAIL";
    case StageReport::Result::kSkip:
      return "SKIP";
    case StageReport::Result::kPending:
      return "PENDING";
  }
  return "?";
}

int ExitCode(const DrillReport& report) {
  switch (report.outcome) {
    case DrillReport::Outcome::kPassed:
      return 0;
    case DrillReport::Outcome::kStageFailed:
      return 1;
    default:
      return 2;
  }
}

Drill::Drill(DrillPlan plan, EngineClient* engine, std::vector<std::unique_ptr<Link>> links,
             Clock* clock)
    : plan_(std::move(plan)), engine_(engine), links_(std::move(links)), clock_(clock) {
  VIGIL_CHECK(plan_.deadlines.contains(Stage::kEngine) && LinkFor(Stage::kEngine) != nullptr);
  for (const auto& [stage, deadline] : plan_.deadlines) VIGIL_CHECK(LinkFor(stage) != nullptr);
}

Link* Drill::LinkFor(Stage stage) const {
  for (const auto& link : links_) {
    if (link->stage() == stage) return link.get();
  }
  return nullptr;
}

absl::StatusOr<uint64_t> Drill::EngineSeq() {
  auto info = engine_->GetEngineInfo();
  if (!info.ok()) return info.status();
  return info->seq();
}

bool Drill::Preflight(DrillReport* report) {
  Target& target = report->target;
  const uint32_t gpu = plan_.fault.gpu;
  auto info = engine_->GetEngineInfo();
  if (!info.ok()) {
    report->outcome = DrillReport::Outcome::kError;
    report->problems.push_back(std::string(MessageOf(info.status())));
    return false;
  }
  target.node = info->node_name();
  target.instance_id = info->instance_id();
  target.gpu = gpu;
  if (plan_.fault.kind == Fault::Kind::kXid) target.xid = plan_.fault.xid;
  auto gpus = engine_->ListGpus();
  if (!gpus.ok()) {
    report->outcome = DrillReport::Outcome::kError;
    report->problems.push_back(std::string(MessageOf(gpus.status())));
    return false;
  }
  for (const v1::Gpu& candidate : gpus->gpus()) {
    if (candidate.index() == gpu) target.uuid = candidate.uuid();
  }
  if (target.uuid.empty()) {
    report->problems.push_back(
        fmt::format("GPU {} does not exist: the engine of node {} has {} GPU(s)", gpu, target.node,
                    gpus->gpus_size()));
  } else {
    v1::GetHealthRequest request;
    request.add_gpus(gpu);
    auto verdict = engine_->GetHealth(request);
    if (!verdict.ok()) {
      report->problems.push_back(std::string(MessageOf(verdict.status())));
    } else if (verdict->gpus_size() == 1) {
      const v1::GpuHealth& health = verdict->gpus(0);
      target.baseline = health.status();
      std::string why;
      for (const v1::SystemHealth& system : health.systems()) {
        if (system.status() == health.status() && system.status() != v1::HEALTH_STATUS_PASS) {
          why += fmt::format("{}{}", why.empty() ? "" : ", ", system.system());
        }
      }
      if (health.status() == v1::HEALTH_STATUS_FAIL) {
        report->problems.push_back(fmt::format(
            "GPU {} already FAILs ({}): a drill needs a GPU whose fault it can tell apart; "
            "see `vigil health --gpu {}`, clear it once fixed, or drill another GPU",
            gpu, why, gpu));
      } else if (health.status() != v1::HEALTH_STATUS_PASS &&
                 health.status() != v1::HEALTH_STATUS_WARN) {
        report->problems.push_back(fmt::format(
            "GPU {}'s health is {} ({}): the engine cannot judge it now, so a drill could not "
            "tell its fault; see `vigil health --gpu {}`",
            gpu, HealthStatusText(health.status()), why, gpu));
      }
    }
  }
  auto injections = engine_->ListInjections();
  if (!injections.ok()) {
    report->problems.push_back(std::string(MessageOf(injections.status())));
  } else {
    for (const v1::Injection& injection : injections->injections()) {
      if (injection.gpu() != gpu) continue;
      report->problems.push_back(fmt::format(
          "GPU {} already has an active injection ({}): clear it first (vigil inject clear {})",
          gpu, injection.id(),
          injection.scenario_id().empty() ? injection.id() : injection.scenario_id()));
    }
  }
  if (!report->problems.empty()) {
    report->outcome = DrillReport::Outcome::kRefused;
    return false;
  }
  for (const auto& [stage, deadline] : plan_.deadlines) {
    if (stage == Stage::kEngine) continue;
    Link* link = LinkFor(stage);
    if (absl::Status ready = link->Preflight(target, plan_.force); !ready.ok()) {
      report->problems.push_back(fmt::format("{}: {}", StageName(stage), MessageOf(ready)));
    }
  }
  if (!report->problems.empty()) {
    report->outcome = DrillReport::Outcome::kRefused;
    return false;
  }
  return true;
}

bool Drill::Inject(DrillReport* report, Mark* mark, absl::Time* engine_time) {
  auto seq = EngineSeq();
  if (!seq.ok()) {
    report->outcome = DrillReport::Outcome::kError;
    report->problems.push_back(std::string(MessageOf(seq.status())));
    return false;
  }
  mark->seq = *seq;
  mark->time = clock_->Now();
  absl::Duration longest;
  for (const auto& [stage, deadline] : plan_.deadlines) longest = std::max(longest, deadline);
  const Fault& fault = plan_.fault;
  absl::StatusOr<v1::Injection> injection;
  switch (fault.kind) {
    case Fault::Kind::kXid: {
      v1::InjectXidRequest request;
      request.set_gpu(fault.gpu);
      request.set_xid(fault.xid);
      request.set_allow_actions(fault.allow_actions);
      auto response = engine_->InjectXid(request);
      injection = response.ok() ? absl::StatusOr<v1::Injection>(response->injection())
                                : absl::StatusOr<v1::Injection>(response.status());
      break;
    }
    case Fault::Kind::kField: {
      v1::InjectFieldRequest request;
      request.set_gpu(fault.gpu);
      request.set_field_id(fault.field->id);
      request.set_value(fault.value);
      request.set_allow_actions(fault.allow_actions);
      // Long enough for every stage to see it; the cleanup ends it as soon as they have.
      // (At most an hour, the engine's default limit: the cleanup ends it anyway.)
      request.set_duration_us(
          absl::ToInt64Microseconds(std::min(longest + absl::Seconds(30), absl::Hours(1))));
      injection = engine_->InjectField(request);
      break;
    }
    case Fault::Kind::kScenario: {
      v1::RunScenarioRequest request;
      request.set_yaml(fault.scenario_yaml);
      request.set_source(fault.scenario_source);
      auto scenario = engine_->RunScenario(request);
      if (scenario.ok()) {
        v1::Injection as_injection;
        as_injection.set_id(scenario->id());
        as_injection.set_start_time_us(scenario->start_time_us());
        injection = as_injection;
      } else {
        injection = scenario.status();
      }
      break;
    }
  }
  if (!injection.ok()) {
    report->outcome = DrillReport::Outcome::kError;
    report->problems.push_back(
        fmt::format("the engine refused the injection: {}", MessageOf(injection.status())));
    return false;
  }
  report->injection_id = injection->id();
  *engine_time = absl::FromUnixMicros(injection->start_time_us());
  return true;
}

void Drill::Watch(Want want, const Mark& since, std::optional<absl::Time> engine_since,
                  std::vector<StageReport*> stages, DrillReport* report) {
  std::vector<StageReport*> pending = stages;
  std::map<Stage, std::string> last;  // what each pending stage showed (or failed with) last
  Target& target = report->target;
  while (!pending.empty()) {
    const absl::Time now = clock_->Now();
    const bool engine_done =
        std::none_of(pending.begin(), pending.end(),
                     [](const StageReport* stage) { return stage->stage == Stage::kEngine; });
    for (auto it = pending.begin(); it != pending.end();) {
      StageReport* stage = *it;
      // Downstream links are judged against what the engine showed: not before it has.
      if (stage->stage != Stage::kEngine && !engine_done) {
        ++it;
        continue;
      }
      Link* link = LinkFor(stage->stage);
      auto seen = link->Look(target, want, since);
      bool decided = false;
      if (!seen.ok()) {
        last[stage->stage] = std::string(MessageOf(seen.status()));
      } else if (seen->failed) {
        stage->result = StageReport::Result::kFail;
        stage->detail = seen->detail;
        decided = true;
      } else if (seen->not_applicable) {
        stage->result = StageReport::Result::kSkip;
        stage->detail = seen->detail;
        decided = true;
      } else if (absl::Status follows =
                     CheckFollows(link->name(), seen->instance_id, seen->node, target);
                 !follows.ok()) {
        stage->result = StageReport::Result::kFail;
        stage->detail = std::string(MessageOf(follows));
        decided = true;
      } else if (seen->shown) {
        stage->result = StageReport::Result::kPass;
        stage->seen_after = seen->at.has_value() && engine_since.has_value()
                                ? std::max(absl::ZeroDuration(), *seen->at - *engine_since)
                                : now - since.time;
        stage->instance_id = seen->instance_id;
        stage->seq = seen->seq;
        stage->detail = seen->detail;
        if (stage->stage == Stage::kEngine && want == Want::kFault) target.fault = seen->status;
        decided = true;
      } else {
        last[stage->stage] = seen->detail;
      }
      if (!decided && now - since.time >= stage->deadline) {
        stage->result = StageReport::Result::kFail;
        stage->detail =
            fmt::format("not {} within {}{}", want == Want::kFault ? "shown" : "back",
                        absl::FormatDuration(stage->deadline),
                        last[stage->stage].empty() ? "" : ": last seen " + last[stage->stage]);
        decided = true;
      }
      it = decided ? pending.erase(it) : std::next(it);
    }
    // The engine failing leaves nothing to judge the others against.
    const bool engine_failed =
        !engine_done &&
        std::none_of(pending.begin(), pending.end(),
                     [](const StageReport* stage) { return stage->stage == Stage::kEngine; }) &&
        std::any_of(stages.begin(), stages.end(), [](const StageReport* stage) {
          return stage->stage == Stage::kEngine && stage->result == StageReport::Result::kFail;
        });
    if (engine_failed) {
      for (StageReport* stage : pending) {
        stage->result = StageReport::Result::kFail;
        stage->detail = want == Want::kFault ? "not judged: the engine did not show the fault"
                                             : "not judged: the engine did not get back";
      }
      pending.clear();
    }
    if (pending.empty()) break;
    clock_->SleepFor(plan_.poll_interval);
  }
  (void)report;
}

void Drill::CleanUp(DrillReport* report, const Mark& injected, Mark* mark) {
  const uint32_t gpu = plan_.fault.gpu;
  // An XID is judged at the engine's next tick: a drill that ended before it (a stage refused
  // at its first look) must still find the incident it raised, so wait for one tick.
  const absl::Time give_up = clock_->Now() + absl::Seconds(10);
  auto seq = EngineSeq();
  while (seq.ok() && *seq <= injected.seq && clock_->Now() < give_up) {
    clock_->SleepFor(plan_.poll_interval);
    seq = EngineSeq();
  }
  mark->time = clock_->Now();
  mark->seq = seq.ok() ? *seq : 0;
  if (plan_.fault.kind != Fault::Kind::kXid && !report->injection_id.empty()) {
    v1::ClearInjectionsRequest request;
    request.set_id(report->injection_id);
    auto cleared = engine_->ClearInjections(request);
    if (!cleared.ok() && cleared.status().code() == absl::StatusCode::kNotFound &&
        plan_.fault.kind == Fault::Kind::kScenario) {
      // The scenario has ended: its injections may still run. Clear them one by one.
      if (auto active = engine_->ListInjections(); active.ok()) {
        for (const v1::Injection& injection : active->injections()) {
          if (injection.scenario_id() != report->injection_id) continue;
          v1::ClearInjectionsRequest one;
          one.set_id(injection.id());
          (void)engine_->ClearInjections(one);  // gone meanwhile: fine
        }
      }
    } else if (!cleared.ok() && cleared.status().code() != absl::StatusCode::kNotFound) {
      report->problems.push_back(fmt::format("cleanup: clearing {} failed: {}",
                                             report->injection_id, MessageOf(cleared.status())));
    }
  }
  // The drill's incidents are sticky where they FAIL: clear the systems that hold an injected
  // one, and only those (a real incident elsewhere on the GPU stays).
  v1::GetHealthRequest health_request;
  health_request.add_gpus(gpu);
  auto verdict = engine_->GetHealth(health_request);
  if (!verdict.ok()) {
    report->problems.push_back(fmt::format("cleanup: reading GPU {}'s health failed: {}", gpu,
                                           MessageOf(verdict.status())));
    return;
  }
  for (const v1::GpuHealth& health : verdict->gpus()) {
    for (const v1::SystemHealth& system : health.systems()) {
      const auto& incidents = system.incidents();
      const bool drill =
          std::any_of(incidents.begin(), incidents.end(),
                      [](const v1::HealthIncident& incident) { return incident.injected(); });
      if (!drill) continue;
      // A clear takes the whole system: never one that also holds a real incident.
      const auto real =
          std::find_if(incidents.begin(), incidents.end(),
                       [](const v1::HealthIncident& incident) { return !incident.injected(); });
      if (real != incidents.end()) {
        report->problems.push_back(fmt::format(
            "cleanup: GPU {}'s {} also holds a real incident ({}: {}): not cleared; clear it "
            "yourself once that is dealt with (vigil health clear --gpu {} --system {})",
            gpu, system.system(), real->code(), real->message(), gpu, system.system()));
        continue;
      }
      v1::ClearHealthRequest clear;
      clear.set_gpu(gpu);
      clear.set_system(system.system());
      if (auto cleared = engine_->ClearHealth(clear); !cleared.ok()) {
        report->problems.push_back(fmt::format("cleanup: clearing GPU {} {} failed: {}", gpu,
                                               system.system(), MessageOf(cleared.status())));
      }
    }
  }
}

DrillReport Drill::Run() {
  DrillReport report;
  report.fault = plan_.fault.Describe();
  if (!Preflight(&report)) return report;

  // One row per stage the way there; the stages not named are SKIP. The health check's quarantine
  // is of the node or of the GPU: one row, `taint` unless the drill follows the GPU's.
  const Stage quarantine_row =
      plan_.deadlines.contains(Stage::kDeviceQuarantine) ? Stage::kDeviceQuarantine : Stage::kTaint;
  for (Stage stage : kAllStages) {
    if (IsQuarantineStage(stage) && stage != quarantine_row) continue;
    StageReport row{.stage = stage, .phase = Want::kFault};
    if (auto it = plan_.deadlines.find(stage); it != plan_.deadlines.end()) {
      row.deadline = it->second;
      row.link = LinkFor(stage)->name();
      row.result = StageReport::Result::kFail;  // until it shows
    } else {
      row.detail = "not named";
    }
    report.stages.push_back(std::move(row));
  }
  Mark injected;
  absl::Time engine_time;
  if (!Inject(&report, &injected, &engine_time)) {
    report.stages.clear();
    return report;
  }
  std::vector<StageReport*> there;
  for (StageReport& row : report.stages) {
    if (!row.link.empty()) there.push_back(&row);
  }
  Watch(Want::kFault, injected, engine_time, there, &report);

  if (!plan_.cleanup) {
    report.notes.push_back(fmt::format(
        "no cleanup (--no-cleanup): {} stays until it ends, and GPU {}'s drill incidents until "
        "`vigil health clear --gpu {}`",
        report.injection_id, plan_.fault.gpu, plan_.fault.gpu));
  } else {
    Mark cleaned;
    CleanUp(&report, injected, &cleaned);
    // The way back, for the stages that showed the fault.
    std::vector<StageReport> back;
    for (const StageReport& row : report.stages) {
      if (row.phase != Want::kFault || row.link.empty()) continue;
      StageReport way_back{.stage = row.stage,
                           .phase = Want::kRecovered,
                           .deadline = row.deadline,
                           .link = row.link};
      // The taint goes only after the health check's hysteresis: wait for it, and then some.
      if ((IsQuarantineStage(row.stage) || IsRemediationStage(row.stage)) &&
          plan_.untaint_after.has_value()) {
        way_back.deadline = std::max(row.deadline, *plan_.untaint_after + absl::Seconds(30));
      }
      if (row.result == StageReport::Result::kSkip) {
        way_back.result = StageReport::Result::kSkip;
        way_back.detail = row.detail;
      } else if (row.result != StageReport::Result::kPass) {
        way_back.result = StageReport::Result::kSkip;
        way_back.detail = "the fault never showed here";
      } else if (SlowWayBack(row.stage, plan_.fault.allow_actions) && !plan_.wait_recovery) {
        way_back.result = StageReport::Result::kPending;
        way_back.detail = PendingWhy(row.stage, plan_.untaint_after);
      } else {
        way_back.result = StageReport::Result::kFail;  // until it is back
      }
      back.push_back(std::move(way_back));
    }
    const size_t first_back = report.stages.size();
    for (StageReport& row : back) report.stages.push_back(std::move(row));
    std::vector<StageReport*> following;
    for (size_t i = first_back; i < report.stages.size(); ++i) {
      if (report.stages[i].result == StageReport::Result::kFail)
        following.push_back(&report.stages[i]);
    }
    Watch(Want::kRecovered, cleaned, std::nullopt, following, &report);
    // Nothing of the drill stays behind.
    if (auto injections = engine_->ListInjections(); injections.ok()) {
      for (const v1::Injection& injection : injections->injections()) {
        if (injection.gpu() == plan_.fault.gpu) {
          report.problems.push_back(fmt::format("cleanup: {} is still active on GPU {}",
                                                injection.id(), injection.gpu()));
        }
      }
    }
  }
  const bool failed =
      !report.problems.empty() ||
      std::any_of(report.stages.begin(), report.stages.end(),
                  [](const StageReport& row) { return row.result == StageReport::Result::kFail; });
  report.outcome = failed ? DrillReport::Outcome::kStageFailed : DrillReport::Outcome::kPassed;
  return report;
}

}  // namespace vigil::drill
