// A compute process on a GPU, as the backend reads it and the engine serves it: the value type the
// per-process series are made of. A plain value: thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace vigil {

// What the driver lists of one process (nvmlProcessInfo_t, and its latest
// nvmlProcessUtilizationSample_t).
struct GpuProcess {
  uint32_t pid = 0;  // in the host's PID namespace
  // The GPU (or instance) memory it holds; nullopt where the driver does not say
  // (NVML_VALUE_NOT_AVAILABLE: a process in another container without the rights to see it).
  std::optional<uint64_t> used_memory_bytes;
  int32_t gpu_instance = -1;  // the MIG GPU instance it runs on; -1: the whole GPU
  // Percent of the SMs' time it used over the driver's last sample; nullopt where the driver does
  // not say (MIG instances, drivers without per-process utilisation).
  std::optional<uint32_t> sm_util;
  bool operator==(const GpuProcess&) const = default;
};

// One GPU's processes as of a read: `known` false where they could not be read (the GPU lost or
// stuck, a driver that cannot list them) — unknown, which is not "none".
struct GpuProcessList {
  bool known = false;
  std::vector<GpuProcess> processes;
};

}  // namespace vigil
