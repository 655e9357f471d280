// The UIDs of the pods on one node, for the exporter's pod_uid label (dcgm-exporter's
// --kubernetes-enable-pod-uid): the kubelet's pod-resources API names a GPU's pods by namespace
// and name only, so the UID comes from the API server — an informer over /api/v1/pods with
// fieldSelector spec.nodeName=NODE (one node's pods, never the cluster's), each pod reduced to
// its namespace, name, uid and resourceVersion.
// Threads: the informer's own after Start(); UidOf(), synced() and errors() from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "kube/informer.h"
#include "kube/kube_api.h"

namespace vigil::kube {

class PodUids {
 public:
  // `api` (shared with its owner) reaches the API server; `node` names the node whose pods are
  // cached.
  PodUids(std::shared_ptr<KubeApi> api, const std::string& node, Clock* clock = Clock::Real());

  void Start() { informer_.Start(); }
  void Stop() { informer_.Stop(); }

  // The UID of pod `ns`/`name`; "" while the cache does not hold it (before the first LIST, a
  // pod created since the last event, or an API server that cannot be reached).
  std::string UidOf(const std::string& ns, const std::string& name) const;
  bool synced() const { return informer_.synced(); }
  // Failed LISTs and WATCHes of the pods.
  uint64_t errors() const { return informer_.stats().errors; }

 private:
  std::shared_ptr<KubeApi> api_;  // before informer_, which uses it
  Informer informer_;
};

}  // namespace vigil::kube
