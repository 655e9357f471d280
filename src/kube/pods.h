// Pods as a drain needs them: the pods on one node (a LIST with fieldSelector spec.nodeName, in
// pages), and the Eviction API (policy/v1), whose answers say what happened: 201 evicted, 404
// gone already, 429 a PodDisruptionBudget forbids it now (retry later), anything else an error.
// Stateless functions over a KubeApi; thread-safe as the KubeApi is.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

// Every pod on `node` (matching `label_selector` when given), across namespaces (pages of 500).
// Unavailable / FailedPrecondition with the API server's message.
absl::StatusOr<std::vector<nlohmann::json>> ListPodsOnNode(KubeApi& api, const std::string& node,
                                                           const std::string& label_selector = "");

enum class Eviction : uint8_t {
  kEvicted,  // 201: the pod terminates with its grace period
  kGone,     // 404: nothing to evict
  kBlocked,  // 429: a PodDisruptionBudget allows no disruption now
};
// Asks the API server to evict pod `ns`/`name`. *retry_after: the server's hint with a 429 (zero
// when it gave none). Unavailable for no answer or a server error (5xx: 500 also when several
// PDBs select the pod), FailedPrecondition for any other answer.
absl::StatusOr<Eviction> Evict(KubeApi& api, const std::string& ns, const std::string& name,
                               absl::Duration* retry_after);

// Deletes pod `ns`/`name` (its grace period applies), bypassing any PodDisruptionBudget: the
// drain's last resort (--force-after). True when deleted, false when it was gone already;
// Unavailable for no answer or a server error, FailedPrecondition for any other answer.
absl::StatusOr<bool> DeletePod(KubeApi& api, const std::string& ns, const std::string& name);

// What a pod holds of the node's GPUs: its containers' limits (or requests) of nvidia.com/gpu
// and nvidia.com/mig-* (e.g. {"nvidia.com/gpu"}); empty for a pod without GPUs.
std::vector<std::string> GpuResourcesOf(const nlohmann::json& pod);
// A pod a drain never evicts: owned by a DaemonSet (it would come straight back) or a mirror
// (static) pod (the kubelet's own).
bool OwnedByDaemonSet(const nlohmann::json& pod);
bool IsMirrorPod(const nlohmann::json& pod);

}  // namespace vigil::kube
