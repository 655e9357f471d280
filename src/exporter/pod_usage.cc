// Implements the per-pod usage of shared GPUs.
#include "exporter/pod_usage.h"

#include "common/status.h"
#include "pidmap/pod_cgroup.h"

namespace vigil {

ProcessPods LookUpProcessPods(const std::string& proc_root,
                              const google::protobuf::RepeatedPtrField<v1::GpuProcesses>& lists,
                              std::string* first_error) {
  ProcessPods pods;
  first_error->clear();
  for (const v1::GpuProcesses& list : lists) {
    for (const v1::GpuProcess& process : list.processes()) {
      const uint32_t pid = process.pid();
      if (pods.uid_of.contains(pid) || pods.untold.contains(pid)) continue;  // on two GPUs
      auto pod = pidmap::PodOfPid(proc_root, pid);
      if (pod.ok()) {
        pods.uid_of.emplace(pid, pod->pod_uid);
      } else if (!absl::IsNotFound(pod.status())) {
        pods.untold.insert(pid);
        if (first_error->empty()) *first_error = std::string(MessageOf(pod.status()));
      }
    }
  }
  return pods;
}

ProcessPods UnknownProcessPods(const google::protobuf::RepeatedPtrField<v1::GpuProcesses>& lists) {
  ProcessPods pods;
  for (const v1::GpuProcesses& list : lists) {
    for (const v1::GpuProcess& process : list.processes()) pods.untold.insert(process.pid());
  }
  return pods;
}

std::optional<std::map<std::string, PodUsage>> PodUsageOf(
    const v1::GpuProcesses& list, int32_t gpu_instance, const ProcessPods& pods,
    const std::vector<std::string>& pod_uids) {
  if (!list.known()) return std::nullopt;
  std::map<std::string, PodUsage> usage;
  for (const std::string& uid : pod_uids) {
    if (uid.empty()) continue;
    // NVML's per-process utilisation covers whole GPUs only: on an instance, unknown even for a
    // pod with no process, so that the instance's pods are all served or none.
    usage[uid] =
        PodUsage{.fb_used_mib = 0,
                 .gpu_util_percent = gpu_instance < 0 ? std::optional<int64_t>(0) : std::nullopt};
  }
  for (const v1::GpuProcess& process : list.processes()) {
    if (process.gpu_instance() != gpu_instance) continue;
    if (pods.untold.contains(process.pid())) return std::nullopt;
    auto owner = pods.uid_of.find(process.pid());
    if (owner == pods.uid_of.end()) continue;  // in no pod, or gone
    auto pod = usage.find(owner->second);
    if (pod == usage.end()) continue;  // a pod the kubelet did not give this GPU
    PodUsage& share = pod->second;
    if (share.fb_used_mib && process.used_memory_bytes() >= 0) {
      *share.fb_used_mib += process.used_memory_bytes() / (1024 * 1024);
    } else {
      share.fb_used_mib.reset();
    }
    if (share.gpu_util_percent && process.sm_util() >= 0) {
      *share.gpu_util_percent += process.sm_util();
    } else {
      share.gpu_util_percent.reset();
    }
  }
  return usage;
}

}  // namespace vigil
