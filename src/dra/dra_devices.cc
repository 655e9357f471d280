// Implements DraDevices: discovery with backoff, then an informer of this node's ResourceSlices.
#include "dra/dra_devices.h"

#include "common/backoff.h"
#include "common/status.h"
#include "common/thread.h"
#include "kube/discovery.h"
#include "spdlog/spdlog.h"

namespace vigil {

namespace {

// ResourceSlices: GA in v1 (1.34); v1beta2 from 1.33, v1beta1 from 1.32.

}  // namespace

std::string_view DraStateName(DraState state) {
  switch (state) {
    case DraState::kDiscovering:
      return "discovering";
    case DraState::kNoDraApi:
      return "no_dra_api";
    case DraState::kWatching:
      return "watching";
  }
  return "unknown";
}

std::vector<dra::GpuRef> GpuRefsOf(const std::vector<v1::Gpu>& gpus) {
  std::vector<dra::GpuRef> refs;
  for (const v1::Gpu& gpu : gpus) {
    refs.push_back({.gpu = gpu.index(), .uuid = gpu.uuid(), .pci_bus_id = gpu.pci_bus_id()});
    for (const v1::MigInstance& instance : gpu.mig_instances()) {
      refs.push_back({.gpu = gpu.index(),
                      .gpu_instance = instance.gpu_instance_id(),
                      .uuid = instance.uuid()});
    }
  }
  return refs;
}

DraDevices::DraDevices(kube::KubeApi* api, DraDevicesOptions options)
    : api_(api), options_(std::move(options)) {}

DraDevices::~DraDevices() { Stop(); }

void DraDevices::Start() {
  if (thread_.joinable()) return;
  thread_ = StartNamedThread("vigil-dra", [this] { Run(); });
}

void DraDevices::Stop() {
  if (!stopping_.HasBeenNotified()) stopping_.Notify();
  if (thread_.joinable()) thread_.join();
  const std::shared_ptr<kube::Informer> slices = Slices();
  if (slices != nullptr) slices->Stop();
}

void DraDevices::Run() {
  Backoff backoff(BackoffPolicy{.initial = absl::Seconds(1), .max = absl::Minutes(1)});
  std::string logged;
  for (;;) {
    absl::StatusOr<std::string> version = kube::ServedVersion(
        *api_, "resource.k8s.io", "resourceslices", kube::kResourceSliceVersions);
    if (version.ok()) {
      auto slices = std::make_shared<kube::Informer>(
          api_, kube::InformerOptions{
                    .path = "/apis/resource.k8s.io/" + *version + "/resourceslices",
                    .field_selector = "spec.nodeName=" + options_.node_name,
                    .description = "this node's ResourceSlices",
                    .clock = options_.clock,
                });
      slices->AddListener([this](const std::string&) { OnSlicesChanged(); });
      slices->AddSyncListener([this] { OnSlicesChanged(); });
      {
        absl::MutexLock lock(&mutex_);
        api_version_ = *version;
        state_ = DraState::kWatching;
        slices_ = slices;
      }
      spdlog::info("DRA: watching this node's ResourceSlices (resource.k8s.io/{}) for driver {}",
                   *version, options_.driver);
      slices->Start();
      return;
    }
    if (version.status().code() == absl::StatusCode::kNotFound) {
      {
        absl::MutexLock lock(&mutex_);
        state_ = DraState::kNoDraApi;
      }
      spdlog::info("DRA: {}: the node's GPUs are not DRA devices here",
                   MessageOf(version.status()));
      return;
    }
    if (const std::string error(MessageOf(version.status())); error != logged) {
      spdlog::warn("DRA: {}; trying again", error);
      logged = error;
    }
    if (stopping_.WaitForNotificationWithTimeout(backoff.Next())) return;
  }
}

void DraDevices::OnSlicesChanged() {
  const bool none = Devices().empty();
  absl::MutexLock lock(&mutex_);
  if (none && !said_empty_) {
    said_empty_ = true;
    spdlog::warn(
        "DRA: driver {} publishes no device for node {} in its ResourceSlices: its GPUs are "
        "not DRA devices of that driver (check --dra-driver)",
        options_.driver, options_.node_name);
  } else if (!none) {
    said_empty_ = false;
  }
}

std::shared_ptr<kube::Informer> DraDevices::Slices() const {
  absl::MutexLock lock(&mutex_);
  return slices_;
}

DraState DraDevices::state() const {
  absl::MutexLock lock(&mutex_);
  return state_;
}

std::string DraDevices::api_version() const {
  absl::MutexLock lock(&mutex_);
  return api_version_;
}

bool DraDevices::synced() const {
  const std::shared_ptr<kube::Informer> slices = Slices();
  return slices != nullptr && slices->synced();
}

std::vector<dra::Device> DraDevices::Devices() const {
  const std::shared_ptr<kube::Informer> slices = Slices();
  if (slices == nullptr) return {};
  return dra::DevicesOf(slices->List(), options_.driver, options_.node_name);
}

dra::DeviceMap DraDevices::Map(const std::vector<v1::Gpu>& gpus) const {
  return dra::MapDevices(GpuRefsOf(gpus), Devices());
}

nlohmann::json DraDevices::StatusJson(const std::vector<v1::Gpu>& gpus) const {
  const std::vector<dra::Device> devices = Devices();
  const dra::DeviceMap map = dra::MapDevices(GpuRefsOf(gpus), devices);
  nlohmann::json status = {{"driver", options_.driver},
                           {"state", DraStateName(state())},
                           {"api_version", api_version()},
                           {"synced", synced()},
                           {"devices", devices.size()}};
  nlohmann::json matched = nlohmann::json::array();
  for (const dra::Match& match : map.matches) {
    nlohmann::json entry = {{"gpu", match.gpu.gpu},
                            {"uuid", match.gpu.uuid},
                            {"device", match.device.name},
                            {"pool", match.device.pool},
                            {"matched_by", dra::MatchedByName(match.matched_by)}};
    if (match.gpu.gpu_instance) entry["gpu_instance"] = *match.gpu.gpu_instance;
    matched.push_back(std::move(entry));
  }
  status["gpus"] = std::move(matched);
  nlohmann::json unmatched = nlohmann::json::array();
  for (const dra::GpuRef& gpu : map.unmatched_gpus) {
    nlohmann::json entry = {{"gpu", gpu.gpu}, {"uuid", gpu.uuid}};
    if (gpu.gpu_instance) entry["gpu_instance"] = *gpu.gpu_instance;
    unmatched.push_back(std::move(entry));
  }
  status["unmatched_gpus"] = std::move(unmatched);
  return status;
}

}  // namespace vigil
