// Finds and initialises the NVIDIA driver's NVML library (libnvidia-ml.so.1) at run time with
// dlopen, so the binary has no build-time dependency on NVIDIA's headers or libraries and starts
// on machines without a driver. This is the first step of the nvml backend: it answers "is there
// a driver and a GPU here", with a message that says what to do when not.
// Thread-safety: OpenNvml() from one thread at start-up.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace vigil {

// An initialised NVML; shuts it down and unloads the library when destroyed.
class NvmlLibrary {
 public:
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  unsigned int device_count() const { return device_count_; }
  const std::string& path() const { return path_; }
  // The library handle, for resolving further symbols.
  void* handle() const { return handle_; }

 private:
  friend absl::StatusOr<std::unique_ptr<NvmlLibrary>> OpenNvml(const std::string& path);
  NvmlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_;
  std::string path_;
  unsigned int device_count_ = 0;
  bool initialised_ = false;
};

// Loads `path` ("" means libnvidia-ml.so.1 from the loader's search path), initialises NVML and
// counts the GPUs. FailedPrecondition with an actionable message when the library is missing,
// NVML fails to initialise, or there is no GPU.
absl::StatusOr<std::unique_ptr<NvmlLibrary>> OpenNvml(const std::string& path);

}  // namespace vigil
