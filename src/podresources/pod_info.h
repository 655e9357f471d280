// What the kubelet's pod-resources API says a GPU is allocated to: the value types of the GPU to
// pods mapping (pod_mapper.h), apart so that readers need not include gRPC. Plain structs.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace vigil {

struct PodInfo {
  std::string pod, namespace_name, container;
};
// Device (a GPU's UUID, or a MIG device's id) -> the containers the kubelet gave it to (several
// when the GPU is time-sliced or shared), in the kubelet's order.
using GpuPodMap = std::map<std::string, std::vector<PodInfo>>;

}  // namespace vigil
