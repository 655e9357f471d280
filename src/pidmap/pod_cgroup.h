// Which Kubernetes pod and container a process belongs to, from its /proc/PID/cgroup: the kubelet
// puts each container in a cgroup under kubepods whose path names the pod's UID and the
// container's id, in both the cgroupfs and the systemd driver's layout, on cgroup v1 (a line per
// hierarchy) and v2 (the one "0::" line). What the per-process series need to give a GPU's
// processes to pods (dcgm-exporter #594 reads the same file). Pure functions over files:
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vigil::pidmap {

struct PodCgroup {
  std::string pod_uid;       // "a9c80282-3f6b-4d5b-84d5-a137a6668011" (a static pod's: 32 hex)
  std::string container_id;  // the runtime's 64-hex id; "" where the path stops at the pod
  bool operator==(const PodCgroup&) const = default;
};

// The pod (and container) `text`, a /proc/PID/cgroup file, names. NotFound when it names none (a
// host process, a system service, a container outside Kubernetes); InvalidArgument when it is
// not a cgroup file or its lines name different pods — never a guess.
absl::StatusOr<PodCgroup> ParseProcCgroup(std::string_view text);

// Reads PROC_ROOT/PID/cgroup (PROC_ROOT is /proc, or the host's /proc mounted in a container).
// NotFound also when the process is gone (it may exit between the GPU's list and this read).
absl::StatusOr<PodCgroup> PodOfPid(const std::string& proc_root, uint32_t pid);

// OK when PROC_ROOT shows the host's processes, as the pids NVML gives are the host's whatever
// the caller's PID namespace (the driver knows no namespaces): only there is pid 2 the kernel's
// kthreadd. FailedPrecondition, saying what to mount, when it is a container's own /proc — where
// a GPU process's pid is absent or another process's, and every lookup would be wrong.
absl::Status CheckHostProcRoot(const std::string& proc_root);

}  // namespace vigil::pidmap
