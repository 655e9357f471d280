// What the kubelet's pod-resources API says a GPU is allocated to: the value types of the GPU to
// pods mapping (pod_mapper.h), apart so that readers need not include gRPC. Plain structs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vigil {

struct PodInfo {
  std::string pod, namespace_name, container;
  std::string uid;  // not in the kubelet's answer: from the API server (kube/pod_uids.h), or ""
};
// Device (a GPU's UUID, or a MIG device's id) -> the containers the kubelet gave it to (several
// when the GPU is time-sliced or shared), in the kubelet's order.
using GpuPodMap = std::map<std::string, std::vector<PodInfo>>;

// The ids a device plugin may give the kubelet for one MIG device — GPU instance `gpu_instance`
// (compute instance `compute_instance`) of the GPU with UUID `gpu_uuid` and device name
// `gpu_device` ("nvidia0"): its MIG UUID, the "MIG-<gpu uuid>/<gi>/<ci>" of drivers before R470,
// and "nvidia0/gi3" as GKE's plugin names it. Most specific first.
std::vector<std::string> MigDeviceIds(const std::string& gpu_uuid, const std::string& gpu_device,
                                      uint32_t gpu_instance, uint32_t compute_instance,
                                      const std::string& mig_uuid);

}  // namespace vigil
