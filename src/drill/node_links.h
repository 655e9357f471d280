// The Kubernetes stages of a drill: the node's GpuProblem condition, the health check's
// quarantine — the node's NoSchedule taint, or the GPU's DeviceTaintRule where the health check
// quarantines GPUs — and the remediator's steps, read with a GET of the node (and a list of the
// GPU's rules): the drill runs for minutes, a GET per look is cheaper than a watch.
// Thread-safety: see link.h (one thread per link).
#pragma once

#include <memory>
#include <string>

#include "drill/link.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::drill {

// `kube` (not owned) outlives the links. `node`: the Kubernetes node the engine runs on.
// The condition shows the fault when it is True for a FAIL (reason GpuFailed) or says
// GpuWarning for a WARN, naming the GPU; its message's "engine ID seq N:" says which engine and
// tick it follows. The way back: False, no longer naming the GPU (False at the baseline WARN).
std::unique_ptr<Link> NewNodeConditionLink(kube::KubeApi* kube, std::string node);
// The taint `key` on the node; the way back: the taint gone. Without `actions_allowed` (a drill
// without --allow-actions) the health check must withhold the taint: the stage passes as "would
// taint" when the condition says so (kNoActionForDrill) and the node has no taint, and fails at
// once if the node was tainted.
std::unique_ptr<Link> NewTaintLink(kube::KubeApi* kube, std::string node, std::string key,
                                   bool actions_allowed);
// The GPU's DeviceTaintRule, made by the health check of a node whose GPUs are DRA devices (found
// by its labels: the node and the GPU's UUID), with the node left without the taint `key`:
// "device quarantined". The way back: no rule names the GPU. Without `actions_allowed` the health
// check must withhold the rule, as the taint (see NewTaintLink).
std::unique_ptr<Link> NewDeviceQuarantineLink(kube::KubeApi* kube, std::string node,
                                              std::string key, bool actions_allowed);

// What the health check of a node takes out of service for a GPU's FAIL, and how the drill knows.
struct QuarantineScope {
  bool gpu = false;  // the GPU (a DeviceTaintRule); else the node (the taint)
  std::string why;   // how it was found, for the report's notes
};
// From the health check's /status (`healthcheck_status`, null when the drill names no health
// check): its "quarantine.active". Without it, from the API: the cluster serves DeviceTaintRules
// and `node`'s GPUs are published in ResourceSlices — what the health check's default
// (--quarantine auto) decides on. An error when the API cannot be asked.
absl::StatusOr<QuarantineScope> FindQuarantineScope(kube::KubeApi* kube, const std::string& node,
                                                    const nlohmann::json* healthcheck_status);

// The remediator's steps for the drill's fault (`stage`: kQuarantine, kDrain or kRecovery), from
// its state on the node: a new episode that reached the stage's step — took the node on, drained
// it, recovered it; the way back: handed back. A stuck drain or an escalation fails the stage at
// once. Without `actions_allowed` the remediator only dry-runs a drill's fault: SKIP.
std::unique_ptr<Link> NewRemediationLink(kube::KubeApi* kube, std::string node, Stage stage,
                                         bool actions_allowed);

}  // namespace vigil::drill
