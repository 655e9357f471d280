// Implements OpenNvml. The few NVML declarations used here follow NVIDIA's published NVML API
// reference (nvmlReturn_t is an int; 0 is NVML_SUCCESS).
#include "backend/nvml_loader.h"

#include <dlfcn.h>

#include "fmt/format.h"

namespace vigil {
namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);

template <typename Fn>
Fn Resolve(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

std::string ErrorString(void* handle, nvmlReturn_t code) {
  if (auto error_string = Resolve<ErrorStringFn>(handle, "nvmlErrorString")) {
    return fmt::format("{} (NVML error {})", error_string(code), code);
  }
  return fmt::format("NVML error {}", code);
}

}  // namespace

NvmlLibrary::~NvmlLibrary() {
  if (initialised_) {
    if (auto shutdown = Resolve<ShutdownFn>(handle_, "nvmlShutdown")) shutdown();
  }
  dlclose(handle_);
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
  auto init = Resolve<InitFn>(handle, "nvmlInit_v2");
  if (init == nullptr) init = Resolve<InitFn>(handle, "nvmlInit");
  if (init == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("{} has no nvmlInit: it is not a usable NVML library", library));
  }
  if (const nvmlReturn_t result = init(); result != kNvmlSuccess) {
    return absl::FailedPreconditionError(fmt::format(
        "NVML failed to initialise: {}: check that the NVIDIA driver is loaded (nvidia-smi)",
        ErrorString(handle, result)));
  }
  nvml->initialised_ = true;
  auto get_count = Resolve<GetCountFn>(handle, "nvmlDeviceGetCount_v2");
  if (get_count == nullptr) get_count = Resolve<GetCountFn>(handle, "nvmlDeviceGetCount");
  if (get_count == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("{} has no nvmlDeviceGetCount: it is not a usable NVML library", library));
  }
  if (const nvmlReturn_t result = get_count(&nvml->device_count_); result != kNvmlSuccess) {
    return absl::FailedPreconditionError(
        fmt::format("NVML cannot count the GPUs: {}", ErrorString(handle, result)));
  }
  if (nvml->device_count_ == 0) {
    return absl::FailedPreconditionError(
        "NVML found no GPU on this machine: nothing to monitor (use --backend sim to simulate)");
  }
  return nvml;
}

}  // namespace vigil
