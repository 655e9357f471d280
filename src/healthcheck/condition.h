// Turns the health check's view of the engine into the Kubernetes node condition GpuProblem:
// True when a GPU FAILs, False when all pass (or only warn), Unknown when the engine cannot tell
// or cannot be seen. "Cannot see the engine" becomes Unknown only after `unknown_after` without a
// fresh verdict — an engine restart (a DaemonSet roll-out) must not flip every node's condition
// and flood the cluster with Events; until then the node keeps what it carries.
// Pure functions; thread-safe.
#pragma once

#include <optional>

#include "absl/time/time.h"
#include "healthcheck/monitor.h"
#include "healthcheck/node_reporter.h"

namespace vigil {

// Condition messages stay readable in `kubectl describe node`: longer ones are cut, saying how
// many incidents were left out.
inline constexpr size_t kMaxConditionMessage = 1024;

// `started`: when the health check started (the grace period also covers the first connection).
// nullopt: leave the node's condition as it is.
std::optional<DesiredCondition> ConditionFromView(const HealthView& view, absl::Time now,
                                                  absl::Time started, absl::Duration unknown_after);

}  // namespace vigil
