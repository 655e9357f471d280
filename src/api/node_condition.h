// What the health check writes on a Kubernetes node and other clients read back (the drill, the
// remediator): the GpuProblem condition's type and words, and the taint's key. One place, so the
// writer and the readers cannot drift apart. Constants; thread-safe.
#pragma once

#include <string_view>

namespace vigil {

inline constexpr std::string_view kConditionType = "GpuProblem";
// Reasons of the condition (healthcheck/condition.cc says when each is used).
inline constexpr std::string_view kReasonGpusHealthy = "GpusHealthy";
inline constexpr std::string_view kReasonGpuWarning = "GpuWarning";
// Begins the condition's message (after "engine ID seq N: ") when the failure is a drill's
// injected without --allow-actions: nothing acts on it (no taint).
inline constexpr std::string_view kNoActionForDrill =
    "(no automatic action: every failure is a drill's, injected without --allow-actions)";
// The health check's NoSchedule taint, unless --taint-key says otherwise.
inline constexpr std::string_view kDefaultTaintKey = "vigil.dev/gpu-problem";

}  // namespace vigil
