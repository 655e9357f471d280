// The node's GPUs as DRA devices: which device of the DRA driver's ResourceSlices (NVIDIA's
// `gpu.nvidia.com` by default) is which engine GPU and MIG instance, matched by UUID and PCI bus
// id (dra/device_map.h). How it is found: the resource.k8s.io version the API server serves
// ResourceSlices in is discovered (v1, else v1beta2, else v1beta1), then an informer keeps the
// slices of this node only (fieldSelector spec.nodeName=NODE, the index the API server keeps for
// the kubelet plugins): no request grows with the fleet. A cluster without DRA (no version serves
// ResourceSlices) is said once and left at that; a driver that publishes no device for this node
// is said once too (one WARN), and the map stays empty.
// Threads: its own (`vigil-dra`: discovery with backoff, then the informer's); Map(), StatusJson()
// and the accessors from any thread (one mutex).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "dra/device_map.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"
#include "vigil/v1/engine.pb.h"

namespace vigil {

struct DraDevicesOptions {
  std::string node_name;
  std::string driver = std::string(dra::kNvidiaGpuDriver);
  Clock* clock = Clock::Real();
};

// Where the device map stands.
enum class DraState : uint8_t {
  kDiscovering,  // asking the API server which version serves ResourceSlices
  kNoDraApi,     // no version does: this cluster has no DRA
  kWatching,     // the slices are listed and watched (synced() says whether listed yet)
};
std::string_view DraStateName(DraState state);  // "discovering", "no_dra_api", "watching"

class DraDevices {
 public:
  // `api` (not owned) must outlive this.
  DraDevices(kube::KubeApi* api, DraDevicesOptions options);
  ~DraDevices();

  // Starts discovery and then the watch, on the object's own thread. Idempotent.
  void Start();
  void Stop();

  DraState state() const;
  // The resource.k8s.io version in use ("" before discovery has found one).
  std::string api_version() const;
  // Whether the slices have been listed: before, an empty map says nothing.
  bool synced() const;
  // The driver's devices on this node now.
  std::vector<dra::Device> Devices() const;
  // The engine's GPUs and their MIG instances matched to those devices.
  dra::DeviceMap Map(const std::vector<v1::Gpu>& gpus) const;
  // For the health check's /status: the driver, version, state, and each GPU's device.
  nlohmann::json StatusJson(const std::vector<v1::Gpu>& gpus) const;
  const DraDevicesOptions& options() const { return options_; }

 private:
  void Run();
  // The informer of this node's slices; null before discovery found a version.
  std::shared_ptr<kube::Informer> Slices() const;
  // The informer's listener: says once when the driver publishes nothing for this node.
  void OnSlicesChanged();

  kube::KubeApi* const api_;
  const DraDevicesOptions options_;
  std::thread thread_;
  absl::Notification stopping_;

  mutable absl::Mutex mutex_;
  DraState state_ ABSL_GUARDED_BY(mutex_) = DraState::kDiscovering;
  std::string api_version_ ABSL_GUARDED_BY(mutex_);
  // Made once the version is known; read (its thread-safe accessors) from any thread after.
  std::shared_ptr<kube::Informer> slices_ ABSL_GUARDED_BY(mutex_);
  bool said_empty_ ABSL_GUARDED_BY(mutex_) = false;
};

// The engine's GPUs and MIG instances as the device map matches them.
std::vector<dra::GpuRef> GpuRefsOf(const std::vector<v1::Gpu>& gpus);

}  // namespace vigil
