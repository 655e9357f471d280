// Implements the GPU-to-pods lookups (gpu_pods.h).
#include "healthcheck/gpu_pods.h"

#include <algorithm>

#include "podresources/pod_mapper.h"

namespace vigil {
namespace {

void AddHolders(const std::vector<PodInfo>& holders, std::vector<std::string>* out) {
  for (const PodInfo& pod : holders) {
    std::string id = pod.namespace_name + "/" + pod.pod;
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(std::move(id));
  }
}

}  // namespace

std::vector<std::string> PodsOfMigInstance(const GpuPodMap& pods, const v1::Gpu& gpu,
                                           const v1::MigInstance& instance) {
  std::vector<std::string> out;
  for (const std::string& id : MigDeviceIds(gpu.uuid(), gpu.device(), instance.gpu_instance_id(),
                                            instance.compute_instance_id(), instance.uuid())) {
    if (auto it = pods.find(id); it != pods.end()) AddHolders(it->second, &out);
  }
  return out;
}

std::vector<std::string> PodsOfGpu(const GpuPodMap& pods, const std::string& uuid,
                                   const v1::Gpu* gpu) {
  std::vector<std::string> out;
  if (auto it = pods.find(uuid); it != pods.end()) AddHolders(it->second, &out);
  // A device plugin that names whole GPUs by device name ("nvidia0", GKE's).
  if (gpu != nullptr && !gpu->device().empty()) {
    if (auto it = pods.find(gpu->device()); it != pods.end()) AddHolders(it->second, &out);
  }
  if (gpu != nullptr) {
    for (const v1::MigInstance& instance : gpu->mig_instances()) {
      for (const std::string& pod : PodsOfMigInstance(pods, *gpu, instance)) {
        if (std::find(out.begin(), out.end(), pod) == out.end()) out.push_back(pod);
      }
    }
  }
  for (const auto& [device, holders] : pods) {
    if (MigParentUuid(device) == uuid) AddHolders(holders, &out);
  }
  return out;
}

}  // namespace vigil
