// Implements OpenNvml.
#include "backend/nvml_loader.h"

#include <dlfcn.h>

#include "fmt/format.h"

namespace vigil {

NvmlLibrary::~NvmlLibrary() {
  if (initialised_ && api_.Shutdown != nullptr) api_.Shutdown();
  dlclose(handle_);
}

std::string NvmlLibrary::ErrorString(nvml::Return code) const {
  if (api_.ErrorString != nullptr) {
    if (const char* text = api_.ErrorString(code)) {
      return fmt::format("{} (NVML error {})", text, code);
    }
  }
  return fmt::format("NVML error {}", code);
}

void NvmlLibrary::Release() {
  if (initialised_ && api_.Shutdown != nullptr) api_.Shutdown();
  initialised_ = false;
}

absl::Status NvmlLibrary::Acquire() {
  if (initialised_) return absl::OkStatus();
  if (const nvml::Return result = api_.Init(); result != nvml::kSuccess) {
    return absl::FailedPreconditionError(
        fmt::format("NVML failed to initialise: {}", ErrorString(result)));
  }
  initialised_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NvmlLibrary>> OpenNvml(const std::string& path) {
  const std::string library = path.empty() ? "libnvidia-ml.so.1" : path;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "cannot load the NVIDIA driver's NVML library {} ({}): is the NVIDIA driver installed "
        "and its libraries visible (in a container: the NVIDIA container runtime)? On a machine "
        "without GPUs, use --backend sim",
        library, dlerror()));
  }
  std::unique_ptr<NvmlLibrary> nvml(new NvmlLibrary(handle, library));
  nvml::ResolveApi(handle, &nvml->api_);
  const nvml::Api& api = nvml->api_;
  if (api.Init == nullptr || api.DeviceGetCount == nullptr ||
      api.DeviceGetHandleByIndex == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "{} lacks nvmlInit, nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex: it is not a "
        "usable NVML library",
        library));
  }
  if (const nvml::Return result = api.Init(); result != nvml::kSuccess) {
    return absl::FailedPreconditionError(fmt::format(
        "NVML failed to initialise: {}: check that the NVIDIA driver is loaded (nvidia-smi)",
        nvml->ErrorString(result)));
  }
  nvml->initialised_ = true;
  if (const nvml::Return result = api.DeviceGetCount(&nvml->device_count_);
      result != nvml::kSuccess) {
    return absl::FailedPreconditionError(
        fmt::format("NVML cannot count the GPUs: {}", nvml->ErrorString(result)));
  }
  if (nvml->device_count_ == 0) {
    return absl::FailedPreconditionError(
        "NVML found no GPU on this machine: nothing to monitor (use --backend sim to simulate)");
  }
  return nvml;
}

}  // namespace vigil
