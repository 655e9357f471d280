// What the kubelet's pod-resources API says a GPU is allocated to: the value types of the GPU to
// pods mapping (pod_mapper.h), apart so that readers need not include gRPC. Plain structs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vigil {

// A device a container holds through a DRA ResourceClaim, as the kubelet reports it (pod-resources
// v1 `dynamic_resources`, Kubernetes 1.34+): the claim, and the device of the driver's pool.
struct DraAllocation {
  std::string claim_name, claim_namespace;
  std::string driver, pool, device;
  bool operator==(const DraAllocation&) const = default;
};

struct PodInfo {
  std::string pod, namespace_name, container;
  std::string uid;  // not in the kubelet's answer: from the API server (kube/pod_uids.h), or ""
  std::optional<DraAllocation> dra;  // held through a ResourceClaim (not a device plugin)
  // The replica of a time-sliced or shared GPU the device plugin gave: "3" of the NVIDIA plugin's
  // "GPU-…::3" or of GKE's "nvidia0/vgpu3"; "" for a whole device. dcgm-exporter's vgpu label
  // (with --kubernetes-virtual-gpus).
  std::string vgpu;
};
// Device (a GPU's UUID, or a MIG device's id) -> the containers the kubelet gave it to (several
// when the GPU is time-sliced or shared), in the kubelet's order.
using GpuPodMap = std::map<std::string, std::vector<PodInfo>>;

// The key under which MapPods() keeps the containers of a DRA device until it is known which GPU
// it is ("dra:DRIVER/POOL/DEVICE"): a device's name says nothing of the GPU (gpu-<minor>).
std::string DraDeviceKey(const DraAllocation& allocation);
// Moves the containers of each DRA device to the id of the GPU or MIG instance it is, as
// `uuid_of` says (the DRA driver's ResourceSlices matched to the engine's GPUs:
// dra::DeviceMap::UuidOf); a device `uuid_of` does not know ("") stays under its DraDeviceKey,
// attributed to nothing.
void AttributeDraDevices(const std::function<std::string(const DraAllocation&)>& uuid_of,
                         GpuPodMap* pods);

// The ids a device plugin may give the kubelet for one MIG device — GPU instance `gpu_instance`
// (compute instance `compute_instance`) of the GPU with UUID `gpu_uuid` and device name
// `gpu_device` ("nvidia0"): its MIG UUID, the "MIG-<gpu uuid>/<gi>/<ci>" of drivers before R470,
// and "nvidia0/gi3" as GKE's plugin names it. Most specific first.
std::vector<std::string> MigDeviceIds(const std::string& gpu_uuid, const std::string& gpu_device,
                                      uint32_t gpu_instance, uint32_t compute_instance,
                                      const std::string& mig_uuid);

}  // namespace vigil
