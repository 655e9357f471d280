// Which pods hold a GPU or one of its MIG GPU instances, from the kubelet's device mapping: what
// the relay publishes for a failing GPU (a drain's list) and what /status shows. Pure functions;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "podresources/pod_info.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

// The pods ("namespace/name", each once, in the kubelet's order) given MIG device `instance` of
// `gpu`, under any id a device plugin names it by (MigDeviceIds).
std::vector<std::string> PodsOfMigInstance(const GpuPodMap& pods, const v1::Gpu& gpu,
                                           const v1::MigInstance& instance);

// The pods given the GPU with UUID `uuid` (or, when `gpu` is known, its device name "nvidia0") or
// one of its MIG devices: the GPU's own, those of the
// instances `gpu` lists (null when the GPU list is not known), and those of an old-style MIG id
// naming the GPU ("MIG-<uuid>/<gi>/<ci>").
std::vector<std::string> PodsOfGpu(const GpuPodMap& pods, const std::string& uuid,
                                   const v1::Gpu* gpu);

}  // namespace vigil
