// Runs fault-injection scenarios (inject/scenario.h) on the engine's ticks: each due step is
// applied through a ScenarioTarget (the engine), a step that cannot apply fails the scenario and
// clears what it injected, and a scenario can be cancelled. The engine keeps running a scenario
// after the client that started it has gone.
//
// Threading and locks: Advance() on the tick thread; Start(), Cancel() and List() from gRPC
// threads. `mutex_` guards the runs and is a leaf: it is never held while calling the target, so
// no engine lock nests inside it. A step collected just before a concurrent Cancel() may still be
// applied; Advance() then sees the cancellation and clears that step's injection again, and the
// audit trail shows both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/principal.h"
#include "inject/injection.h"
#include "inject/scenario.h"

namespace vigil {

// A scenario the engine runs or ran.
struct ScenarioRun {
  enum class State { kRunning, kDone, kCancelled, kFailed };
  std::string id;  // "scn-3"
  ScenarioPlan plan;
  Principal principal;
  absl::Time start;
  size_t steps_done = 0;
  State state = State::kRunning;
  std::string error;  // why it failed
};

// What a scenario acts on (the engine). Called without the runner's lock held.
class ScenarioTarget {
 public:
  enum class Audit { kStarted, kStep, kEnded };

  virtual ~ScenarioTarget() = default;
  virtual absl::StatusOr<InjectionRecord> InjectField(const FieldInjectionRequest& request,
                                                      const Principal& principal) = 0;
  virtual absl::StatusOr<InjectionRecord> InjectXid(const XidInjectionRequest& request,
                                                    const Principal& principal) = 0;
  virtual absl::StatusOr<InjectionRecord> InjectPort(const PortInjectionRequest& request,
                                                     const Principal& principal) = 0;
  // Clear the active injections a scenario made, or whatever injection is on (gpu, field),
  // auditing each with `who` and `why`; return their ids.
  virtual std::vector<std::string> ClearScenarioInjections(const std::string& scenario_id,
                                                           const Principal& who,
                                                           std::string_view why) = 0;
  virtual std::vector<std::string> ClearFieldInjection(uint32_t gpu, FieldId field,
                                                       const Principal& who,
                                                       std::string_view why) = 0;
  // ... or whatever injection is on a NIC port's field.
  virtual std::vector<std::string> ClearPortInjection(const std::string& port,
                                                      const std::string& field,
                                                      const Principal& who,
                                                      std::string_view why) = 0;
  // Records an audit event of the scenario's progress.
  virtual void AuditScenario(Audit what, const Principal& who, std::string message) = 0;
};

class ScenarioRunner {
 public:
  // `target` is not owned and outlives the runner. `limits` validates scenarios.
  ScenarioRunner(ScenarioTarget* target, ScenarioLimits limits)
      : target_(target), limits_(limits) {}

  // Validates the whole scenario, then schedules it from `now`; its steps run at Advance().
  absl::StatusOr<ScenarioRun> Start(std::string_view yaml_text, std::string_view source,
                                    const Principal& principal, absl::Time now);
  // Tick thread: applies the steps that are due at `now`.
  void Advance(absl::Time now);
  // Cancels one running scenario (NotFound for an id that is not running) or, with `all`, every
  // one; clears their injections. Returns the scenario ids and the injection ids cleared.
  absl::StatusOr<std::vector<std::string>> Cancel(const std::string& id, bool all,
                                                  const Principal& principal);
  // Running scenarios and the most recent ended ones.
  std::vector<ScenarioRun> List() const;

  static constexpr size_t kEndedKept = 20;

 private:
  struct DueStep {
    std::string scenario_id;
    Principal principal;  // the scenario's own, naming who started it
    ScenarioStep step;
    size_t number = 0;  // 1-based
    size_t total = 0;
  };
  absl::Status Apply(const DueStep& due);
  // Keeps every running scenario and the kEndedKept most recent ended ones.
  void TrimEndedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  ScenarioTarget* const target_;
  const ScenarioLimits limits_;

  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::vector<ScenarioRun> runs_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
