// The Kubernetes stages of a drill: the node's GpuProblem condition and the health check's
// NoSchedule taint, read with a GET of the node (the drill runs for minutes: a GET per look is
// cheaper than a watch). Thread-safety: see link.h (one thread per link).
#pragma once

#include <memory>
#include <string>

#include "drill/link.h"
#include "kube/kube_api.h"

namespace vigil::drill {

// `kube` (not owned) outlives the links. `node`: the Kubernetes node the engine runs on.
// The condition shows the fault when it is True for a FAIL (reason GpuFailed) or says
// GpuWarning for a WARN, naming the GPU; its message's "engine ID seq N:" says which engine and
// tick it follows. The way back: False, no longer naming the GPU (False at the baseline WARN).
std::unique_ptr<Link> NewNodeConditionLink(KubeApi* kube, std::string node);
// The taint `key` on the node; the way back: the taint gone. Without `actions_allowed` (a drill
// without --allow-actions) the health check must withhold the taint: the stage passes as "would
// taint" when the condition says so (kNoActionForDrill) and the node has no taint, and fails at
// once if the node was tainted.
std::unique_ptr<Link> NewTaintLink(KubeApi* kube, std::string node, std::string key,
                                   bool actions_allowed);

}  // namespace vigil::drill
