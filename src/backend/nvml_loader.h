// Finds and initialises the NVIDIA driver's NVML library (libnvidia-ml.so.1) at run time with
// dlopen, so the binary has no build-time dependency on NVIDIA's headers or libraries and starts
// on machines without a driver. It answers "is there a driver and a GPU here", with a message
// that says what to do when not, and resolves the entry points the nvml backend uses.
// Thread-safety: OpenNvml() from one thread at start-up; the library is then shared read-only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend/nvml_api.h"

namespace vigil {

// An initialised NVML; shuts it down and unloads the library when destroyed.
class NvmlLibrary {
 public:
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  unsigned int device_count() const { return device_count_; }
  const std::string& path() const { return path_; }
  // The entry points; any may be null (an older driver lacks it).
  const nvml::Api& api() const { return api_; }
  // "GPU is lost (NVML error 15)".
  std::string ErrorString(nvml::Return code) const;

  // Shuts NVML down, and initialises it again: the driver refuses a GPU reset while any process
  // holds NVML initialised, so the nvml backend releases it around one (as DCGM detaches from the
  // driver: nvmlShutdown, then nvmlInit_v2). Every handle taken before Release() is invalid after
  // it. Precondition: no NVML call in flight (the backend's guard). Acquire() is a no-op when
  // initialised; FailedPrecondition with NVML's words when the driver will not initialise.
  void Release();
  absl::Status Acquire();

 private:
  friend absl::StatusOr<std::unique_ptr<NvmlLibrary>> OpenNvml(const std::string& path);
  NvmlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_;
  std::string path_;
  nvml::Api api_;
  unsigned int device_count_ = 0;
  bool initialised_ = false;
};

// Loads `path` ("" means libnvidia-ml.so.1 from the loader's search path), initialises NVML and
// counts the GPUs. FailedPrecondition with an actionable message when the library is missing,
// NVML fails to initialise, or there is no GPU.
absl::StatusOr<std::unique_ptr<NvmlLibrary>> OpenNvml(const std::string& path);

}  // namespace vigil
