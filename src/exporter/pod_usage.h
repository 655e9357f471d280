// What each pod uses of a shared GPU or GPU instance, for dcgm-exporter's per-pod series
// (--kubernetes-virtual-gpus, dcgm-exporter #594): the engine's list of the GPU's compute
// processes (memory, SM share), each process given to its pod by its /proc/PID/cgroup (pidmap),
// summed per pod. LookUpProcessPods() reads /proc (call it outside any lock a scrape takes);
// PodUsageOf() is a pure function. Both thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "google/protobuf/repeated_ptr_field.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

// Which pod each GPU process runs in, by pid.
struct ProcessPods {
  std::unordered_map<uint32_t, std::string> uid_of;  // pids in a pod: the pod's UID
  // Pids whose pod cannot be told (a cgroup file naming two pods or none readable, /proc not
  // readable): the per-pod values of the GPU they run on are not known.
  std::unordered_set<uint32_t> untold;
  // Pids in neither: in no pod (a host process), or gone before their file was read — a process
  // that ended frees what it used, so it is nobody's.
};

// Looks up the pod of every process in `lists` under `proc_root` (the host's /proc:
// pidmap::CheckHostProcRoot). *first_error gets the first lookup that failed for a reason other
// than "in no pod" or "gone" ("" when none did), for the caller to log once.
ProcessPods LookUpProcessPods(const std::string& proc_root,
                              const google::protobuf::RepeatedPtrField<v1::GpuProcesses>& lists,
                              std::string* first_error);

// Every process of `lists` with its pod untold: for a render whose lookup was not made.
ProcessPods UnknownProcessPods(const google::protobuf::RepeatedPtrField<v1::GpuProcesses>& lists);

// One pod's share of a GPU or GPU instance: dcgm-exporter's per-pod DCGM_FI_DEV_FB_USED (MiB:
// each process's bytes floored to MiB, then summed) and DCGM_FI_DEV_GPU_UTIL (the processes' SM
// percentages summed, unclamped, as NVML samples them). nullopt: not known, so not served —
// never a made-up 0.
struct PodUsage {
  std::optional<int64_t> fb_used_mib;
  std::optional<int64_t> gpu_util_percent;
};

// The usage of each pod in `pod_uids` (those the kubelet gave the GPU, or the GPU instance
// `gpu_instance`; -1 for the whole GPU) from `list`, the engine's processes of that GPU. A pod
// with no process uses 0. nullopt for every pod when the list could not be read or one of its
// processes' pod cannot be told (any pod could be its). Per pod: memory unknown when a process of
// the pod's has none; utilisation unknown on a GPU instance (NVML samples processes of whole
// GPUs only) or when a process of the pod's has no share. An empty UID (the API server has not
// told it yet) is left out.
std::optional<std::map<std::string, PodUsage>> PodUsageOf(const v1::GpuProcesses& list,
                                                          int32_t gpu_instance,
                                                          const ProcessPods& pods,
                                                          const std::vector<std::string>& pod_uids);

}  // namespace vigil
