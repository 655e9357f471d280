// Which pods, namespaces and containers each GPU is allocated to, from the kubelet's pod-resources
// API (v1 List over its Unix socket), for the exporter's pod labels and the health check's list
// of the pods that hold a failing GPU. Refreshed on its own thread every `refresh` and cached:
// readers never call the kubelet. When the socket is missing or the kubelet is down, readers
// carry on without the mapping; a counter and one log line per failure streak say why.
// Thread-safety: Current() from any thread; Start()/Stop() from the owner.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "k8s/podresources/v1/api.grpc.pb.h"
#include "podresources/pod_info.h"

namespace vigil {

struct PodMapperOptions {
  std::string socket_path = "/var/lib/kubelet/pod-resources/kubelet.sock";
  absl::Duration refresh = absl::Seconds(10);
  absl::Duration call_timeout = absl::Seconds(5);
  Clock* clock = Clock::Real();  // waits between refreshes; not owned
};

// Maps one List response to device -> containers: whole GPUs by UUID ("GPU-…", the NVIDIA
// device plugin's device IDs for nvidia.com/gpu and nvidia.com/gpu.shared, also with a
// time-slicing replica suffix "::N" or GKE's "/vgpuN", kept in PodInfo::vgpu), MIG devices by their
// id (the MIG device UUID "MIG-…", or "MIG-GPU-<uuid>/<gi>/<ci>" from drivers before R470), under
// nvidia.com/mig-<profile> (the device plugin's "mixed" strategy) or nvidia.com/gpu ("single");
// device plugins that name devices by device name (GKE's "nvidia0", "nvidia0/gi3") keep those ids.
// *mig_devices: how many MIG devices are held.
GpuPodMap MapPods(const ::v1::ListPodResourcesResponse& response, size_t* mig_devices);
// The parent GPU's UUID of a MIG device id in the old "MIG-GPU-<uuid>/<gi>/<ci>" form; "" for
// any other id (a MIG UUID names no parent: ListGpus does).
std::string MigParentUuid(std::string_view device_id);

class PodMapper {
 public:
  explicit PodMapper(PodMapperOptions options);
  ~PodMapper();

  void Start();
  void Stop();
  // Refreshes now (the thread calls this); returns how it went.
  absl::Status Refresh();

  // The mapping of the last refresh (empty after a failed one).
  GpuPodMap Current() const;
  // The same, or nullopt while the kubelet's API cannot be read (before the first refresh, or
  // after a failed one): "no pod holds this GPU" and "cannot tell" differ for a drain.
  std::optional<GpuPodMap> Known() const;
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  uint64_t refreshes() const { return refreshes_.load(std::memory_order_relaxed); }

 private:
  const PodMapperOptions options_;
  std::unique_ptr<::v1::PodResourcesLister::Stub> stub_;
  std::thread thread_;
  std::atomic<uint64_t> errors_{0}, refreshes_{0};
  bool failing_ = false;  // owned by the refreshing thread: log once per failure streak

  mutable absl::Mutex mutex_;
  GpuPodMap pods_ ABSL_GUARDED_BY(mutex_);
  bool known_ ABSL_GUARDED_BY(mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace vigil
