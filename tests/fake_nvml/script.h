// The script of the fake libnvidia-ml.so.1 (fake_nvml.cc) as tests and benchmarks write it: a
// node of H100s at rest with every value the fake can give, and the file that the fake reads,
// named by FAKE_NVML_CONFIG for this process and those it starts.
// Not thread-safe: owned by one test or benchmark.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace vigil::testing {

// Where the build put the fake: <dir>/current/libnvidia-ml.so.1 (a current driver) and
// <dir>/old/libnvidia-ml.so.1 (an older one lacking some entry points).
std::string FakeNvmlDir();
// <dir>/fake-nvidia-smi: `--gpu-reset -i UUID`, refused while any process holds NVML.
std::string FakeNvidiaSmi();

// GPU `index` as the fake presents it: NVIDIA H100 80GB HBM3, UUID
// GPU-00000000-0000-0000-0000-00000000000<index>, 40 + index °C, 300 + index W, 42 GiB used,
// GPM metrics, no fan (an SXM board).
nlohmann::json FakeNvmlGpu(int index);

class FakeNvmlScript {
 public:
  // Writes a script of `gpus` GPUs to `path` and points FAKE_NVML_CONFIG at it.
  FakeNvmlScript(std::string path, int gpus);
  nlohmann::json& script() { return script_; }
  nlohmann::json& gpu(int index) { return script_["gpus"][index]; }
  // Replaces the file atomically (the fake may read it at any moment) with script().
  void Write();

 private:
  std::string path_;
  nlohmann::json script_;
};

}  // namespace vigil::testing
