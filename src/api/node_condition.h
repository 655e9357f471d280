// What the health check writes on a Kubernetes node and other clients read back (the drill, the
// remediator): the GpuProblem condition's type and words, and the taint's key. One place, so the
// writer and the readers cannot drift apart. Constants; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
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
// Every condition message begins "engine INSTANCE seq N: ", naming the verdict it follows.
std::string ConditionPrefix(std::string_view instance_id, uint64_t seq);
// Reads that prefix back; false (outputs untouched) for a message that does not begin with it.
bool ParseConditionPrefix(std::string_view message, std::string* instance_id, uint64_t* seq);

// The tainted-share circuit breaker, as the health check and the remediator both apply it: at
// most max(1, floor(share x GPU nodes)) nodes may carry the taint — the first is always allowed,
// so a one- or two-node cluster can still take its broken GPU node out.
size_t MaxTaintedNodes(double max_tainted_share, size_t gpu_nodes);

// The health check's NoSchedule taint, unless --taint-key says otherwise.
inline constexpr std::string_view kDefaultTaintKey = "vigil.dev/gpu-problem";

}  // namespace vigil
