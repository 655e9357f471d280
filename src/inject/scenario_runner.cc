// Implements the scenario runner: steps collected under the lock, applied outside it.
#include "inject/scenario_runner.h"

#include "common/status.h"
#include "fmt/format.h"

namespace vigil {
namespace {

// Who a scenario's own steps act as: the engine, on behalf of whoever started the scenario.
Principal StepPrincipal(const std::string& scenario_id, const Principal& starter) {
  return {
      .transport = "engine",
      .uid = starter.uid,
      .pid = starter.pid,
      .description = fmt::format("scenario {} (started by {})", scenario_id, starter.description)};
}

}  // namespace

absl::StatusOr<ScenarioRun> ScenarioRunner::Start(std::string_view yaml_text,
                                                  std::string_view source,
                                                  const Principal& principal, absl::Time now) {
  auto plan = ParseScenario(yaml_text, source, limits_);
  if (!plan.ok()) return plan.status();
  ScenarioRun run{.plan = std::move(*plan), .principal = principal, .start = now};
  {
    absl::MutexLock lock(&mutex_);
    run.id = fmt::format("scn-{}", next_id_++);
  }
  // Audited before the run is added, so no tick can apply (and audit) a step of it first.
  target_->AuditScenario(ScenarioTarget::Audit::kStarted, principal,
                         fmt::format("{} '{}' started: {} step(s) over {}", run.id, run.plan.name,
                                     run.plan.steps.size(), absl::FormatDuration(run.plan.length)));
  absl::MutexLock lock(&mutex_);
  runs_.push_back(run);
  TrimEndedLocked();
  return run;
}

void ScenarioRunner::Advance(absl::Time now) {
  std::vector<DueStep> due;
  {
    absl::MutexLock lock(&mutex_);
    for (ScenarioRun& run : runs_) {
      if (run.state != ScenarioRun::State::kRunning) continue;
      // Counted as done now; a failure below sets the count back to the steps that applied.
      while (run.steps_done < run.plan.steps.size() &&
             run.start + run.plan.steps[run.steps_done].at <= now) {
        due.push_back({.scenario_id = run.id,
                       .principal = run.principal,
                       .step = run.plan.steps[run.steps_done],
                       .number = run.steps_done + 1,
                       .total = run.plan.steps.size()});
        ++run.steps_done;
      }
    }
  }
  std::string failed_id;  // a failed scenario's remaining due steps are skipped
  for (const DueStep& step : due) {
    if (step.scenario_id == failed_id) continue;
    const absl::Status applied = Apply(step);
    bool cancelled_meanwhile = false;
    std::string name, error;
    {
      absl::MutexLock lock(&mutex_);
      for (ScenarioRun& run : runs_) {
        if (run.id != step.scenario_id) continue;
        name = run.plan.name;
        cancelled_meanwhile = run.state == ScenarioRun::State::kCancelled;
        if (!applied.ok() && run.state == ScenarioRun::State::kRunning) {
          run.state = ScenarioRun::State::kFailed;
          run.steps_done = step.number - 1;
          run.error = fmt::format("step at +{} (line {}): {}", absl::FormatDuration(step.step.at),
                                  step.step.line, MessageOf(applied));
          error = run.error;
        }
      }
    }
    if (cancelled_meanwhile) {  // cancelled while this step applied: take its injection back
      target_->ClearScenarioInjections(step.scenario_id, step.principal,
                                       step.scenario_id + " cancelled");
    }
    if (!error.empty()) {
      failed_id = step.scenario_id;
      const std::string reason = "failed: " + error;
      target_->ClearScenarioInjections(step.scenario_id, step.principal,
                                       fmt::format("{} {}", step.scenario_id, reason));
      target_->AuditScenario(ScenarioTarget::Audit::kEnded, step.principal,
                             fmt::format("{} '{}' {} after {} of {} step(s)", step.scenario_id,
                                         name, reason, step.number - 1, step.total));
    }
  }
  std::vector<ScenarioRun> finished;
  {
    absl::MutexLock lock(&mutex_);
    for (ScenarioRun& run : runs_) {
      if (run.state == ScenarioRun::State::kRunning && run.steps_done == run.plan.steps.size()) {
        run.state = ScenarioRun::State::kDone;
        finished.push_back(run);
      }
    }
    TrimEndedLocked();
  }
  for (const ScenarioRun& run : finished) {
    target_->AuditScenario(
        ScenarioTarget::Audit::kEnded, run.principal,
        fmt::format("{} '{}' done: {} step(s) applied", run.id, run.plan.name, run.steps_done));
  }
}

absl::Status ScenarioRunner::Apply(const DueStep& due) {
  const Principal principal = StepPrincipal(due.scenario_id, due.principal);
  const ScenarioStep& step = due.step;
  target_->AuditScenario(ScenarioTarget::Audit::kStep, principal,
                         fmt::format("{} step {}/{} at +{} (line {})", due.scenario_id, due.number,
                                     due.total, absl::FormatDuration(step.at), step.line));
  switch (step.action) {
    case ScenarioStep::Action::kInjectField:
      return target_
          ->InjectField({.gpu = step.gpu,
                         .field = step.field,
                         .value = step.value,
                         .add = step.add,
                         .duration = step.duration,
                         .scenario_id = due.scenario_id},
                        principal)
          .status();
    case ScenarioStep::Action::kInjectXid:
      return target_
          ->InjectXid({.gpu = step.gpu, .xid = step.xid, .scenario_id = due.scenario_id}, principal)
          .status();
    case ScenarioStep::Action::kClearAll:
      target_->ClearScenarioInjections(due.scenario_id, principal, "scenario step");
      return absl::OkStatus();
    case ScenarioStep::Action::kClearField:
      target_->ClearFieldInjection(step.gpu, step.field, principal, "scenario step");
      return absl::OkStatus();
    case ScenarioStep::Action::kInjectPort:
      return target_
          ->InjectPort({.port = step.port,
                        .field = step.port_field,
                        .value = step.value,
                        .add = step.add,
                        .duration = step.duration,
                        .scenario_id = due.scenario_id},
                       principal)
          .status();
    case ScenarioStep::Action::kClearPort:
      target_->ClearPortInjection(step.port, step.port_field, principal, "scenario step");
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ScenarioRunner::Cancel(const std::string& id, bool all,
                                                                const Principal& principal) {
  std::vector<ScenarioRun> cancelled;
  {
    absl::MutexLock lock(&mutex_);
    for (ScenarioRun& run : runs_) {
      if (run.state != ScenarioRun::State::kRunning || (!all && run.id != id)) continue;
      run.state = ScenarioRun::State::kCancelled;
      cancelled.push_back(run);
    }
  }
  if (!all && cancelled.empty()) {
    return absl::NotFoundError(
        fmt::format("no running scenario {}: `vigil inject list` shows what is running", id));
  }
  std::vector<std::string> ids;
  for (const ScenarioRun& run : cancelled) {
    ids.push_back(run.id);
    for (std::string& injection :
         target_->ClearScenarioInjections(run.id, principal, run.id + " cancelled")) {
      ids.push_back(std::move(injection));
    }
    target_->AuditScenario(ScenarioTarget::Audit::kEnded, principal,
                           fmt::format("{} '{}' cancelled after {} of {} step(s)", run.id,
                                       run.plan.name, run.steps_done, run.plan.steps.size()));
  }
  return ids;
}

std::vector<ScenarioRun> ScenarioRunner::List() const {
  absl::MutexLock lock(&mutex_);
  return runs_;
}

void ScenarioRunner::TrimEndedLocked() {
  size_t ended = 0;
  for (const ScenarioRun& run : runs_) ended += run.state != ScenarioRun::State::kRunning;
  for (auto it = runs_.begin(); ended > kEndedKept && it != runs_.end();) {
    if (it->state != ScenarioRun::State::kRunning) {
      it = runs_.erase(it);
      --ended;
    } else {
      ++it;
    }
  }
}

}  // namespace vigil
