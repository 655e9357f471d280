// Implements the kubelet pod-resources client.
#include "podresources/pod_mapper.h"

#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "spdlog/spdlog.h"

namespace vigil {

GpuPodMap MapPods(const ::v1::ListPodResourcesResponse& response, size_t* mig_devices) {
  GpuPodMap pods;
  *mig_devices = 0;
  for (const auto& pod : response.pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& devices : container.devices()) {
        const std::string& resource = devices.resource_name();
        // nvidia.com/gpu (also .shared, and MIG devices under the "single" strategy) and
        // nvidia.com/mig-<profile> (the "mixed" strategy).
        const bool mig_resource = resource.starts_with("nvidia.com/mig-");
        if (!mig_resource && !resource.starts_with("nvidia.com/gpu")) continue;
        for (std::string id : devices.device_ids()) {
          // A shared GPU's replica: the device is the GPU (or MIG device) before the suffix.
          std::string vgpu;
          for (const std::string_view separator : {"::", "/vgpu"}) {
            if (const size_t replica = id.find(separator); replica != std::string::npos) {
              vgpu = id.substr(replica + separator.size());
              id.resize(replica);
            }
          }
          // Device plugins name devices by UUID ("GPU-…", "MIG-…"); some (GKE's) by device name
          // ("nvidia0", "nvidia0/gi3"), which --kubernetes-gpu-id-type device-name matches.
          if (!id.starts_with("GPU-") && !id.starts_with("MIG-") && !id.starts_with("nvidia")) {
            continue;
          }
          if (id.starts_with("MIG-") || id.find("/gi") != std::string::npos) ++*mig_devices;
          pods[id].push_back(PodInfo{.pod = pod.name(),
                                     .namespace_name = pod.namespace_(),
                                     .container = container.name(),
                                     .vgpu = std::move(vgpu)});
        }
      }
      // DRA: every device of every claim, under its driver/pool/device until the caller knows
      // which GPU it is (AttributeDraDevices).
      for (const auto& claim : container.dynamic_resources()) {
        for (const auto& resource : claim.claim_resources()) {
          if (resource.device_name().empty()) continue;
          DraAllocation allocation{.claim_name = claim.claim_name(),
                                   .claim_namespace = claim.claim_namespace(),
                                   .driver = resource.driver_name(),
                                   .pool = resource.pool_name(),
                                   .device = resource.device_name()};
          const std::string key = DraDeviceKey(allocation);
          pods[key].push_back(PodInfo{.pod = pod.name(),
                                      .namespace_name = pod.namespace_(),
                                      .container = container.name(),
                                      .dra = std::move(allocation)});
        }
      }
    }
  }
  return pods;
}

std::string DraDeviceKey(const DraAllocation& allocation) {
  return "dra:" + allocation.driver + "/" + allocation.pool + "/" + allocation.device;
}

void AttributeDraDevices(const std::function<std::string(const DraAllocation&)>& uuid_of,
                         GpuPodMap* pods) {
  for (auto it = pods->begin(); it != pods->end();) {
    if (!it->first.starts_with("dra:") || it->second.empty() || !it->second.front().dra) {
      ++it;
      continue;
    }
    const std::string uuid = uuid_of(*it->second.front().dra);
    if (uuid.empty()) {
      ++it;
      continue;
    }
    std::vector<PodInfo>& held = (*pods)[uuid];
    held.insert(held.end(), it->second.begin(), it->second.end());
    it = pods->erase(it);
  }
}

PodMapper::PodMapper(PodMapperOptions options) : options_(std::move(options)) {
  stub_ = ::v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix:" + options_.socket_path, grpc::InsecureChannelCredentials()));
}

PodMapper::~PodMapper() { Stop(); }

void PodMapper::Start() {
  thread_ = StartNamedThread("vigil-pods", [this] {
    while (true) {
      (void)Refresh();
      absl::MutexLock lock(&mutex_);
      if (options_.clock->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_),
                                           options_.refresh)) {
        return;
      }
    }
  });
}

void PodMapper::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status PodMapper::Refresh() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  ::v1::ListPodResourcesResponse response;
  const grpc::Status status = stub_->List(&context, ::v1::ListPodResourcesRequest(), &response);
  refreshes_.fetch_add(1, std::memory_order_relaxed);
  if (!status.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (!failing_) {
      spdlog::warn(
          "pod attribution: cannot list pod resources from the kubelet at {} ({}); "
          "pods are not attributed to GPUs until it answers",
          options_.socket_path, status.error_message());
      failing_ = true;
    }
    absl::MutexLock lock(&mutex_);
    pods_.clear();  // never attribute a GPU to a pod we can no longer confirm
    known_ = false;
    return absl::UnavailableError(status.error_message());
  }
  size_t mig_devices = 0;
  auto pods = MapPods(response, &mig_devices);
  if (failing_) {
    spdlog::info("pod attribution: the kubelet answers again ({} GPU(s) attributed)", pods.size());
    failing_ = false;
  }
  if (mig_devices > 0) {
    spdlog::debug("pod attribution: {} MIG device(s) seen", mig_devices);
  }
  absl::MutexLock lock(&mutex_);
  pods_ = std::move(pods);
  known_ = true;
  return absl::OkStatus();
}

GpuPodMap PodMapper::Current() const { return Known().value_or(GpuPodMap{}); }

std::optional<GpuPodMap> PodMapper::Known() const {
  absl::MutexLock lock(&mutex_);
  if (!known_) return std::nullopt;
  return pods_;
}

std::vector<std::string> MigDeviceIds(const std::string& gpu_uuid, const std::string& gpu_device,
                                      uint32_t gpu_instance, uint32_t compute_instance,
                                      const std::string& mig_uuid) {
  std::vector<std::string> ids;
  if (!mig_uuid.empty()) ids.push_back(mig_uuid);
  ids.push_back(fmt::format("MIG-{}/{}/{}", gpu_uuid, gpu_instance, compute_instance));
  ids.push_back(fmt::format("{}/gi{}", gpu_device, gpu_instance));
  return ids;
}

std::string MigParentUuid(std::string_view device_id) {
  // "MIG-GPU-<uuid>/<gi>/<ci>", the device plugin's id on drivers before R470.
  if (!device_id.starts_with("MIG-GPU-")) return "";
  const std::string_view rest = device_id.substr(4);
  return std::string(rest.substr(0, rest.find('/')));
}

}  // namespace vigil
