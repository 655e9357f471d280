// A fake of `nvidia-smi --gpu-reset -i ID` for the fake libnvidia-ml (fake_nvml.cc): it refuses,
// as the driver does, while any live process holds NVML initialised (the fake library records
// each holder as a file named by its pid in <FAKE_NVML_CONFIG>.holders/), and otherwise resets the
// GPU in the script: "reset_required" and "lost" cleared, the volatile ECC and energy counters
// back to 0, "resets" counted. Its words and exit
// codes are nvidia-smi's (NVIDIA/NVSentinel#1690, NVIDIA/gpu-operator#118).
// Single-threaded; a process of its own.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

int Usage() {
  std::fprintf(stderr, "usage: fake-nvidia-smi --gpu-reset -i UUID|INDEX\n");
  return 2;
}

bool Alive(int pid) { return kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() != 3 || (args[0] != "--gpu-reset" && args[0] != "-r") || args[1] != "-i") {
    return Usage();
  }
  const char* config = std::getenv("FAKE_NVML_CONFIG");
  if (config == nullptr) {
    std::fprintf(stderr, "fake-nvidia-smi: FAKE_NVML_CONFIG is not set\n");
    return 2;
  }
  json script = json::parse(std::ifstream(config), nullptr, /*allow_exceptions=*/false);
  if (script.is_discarded() || !script.contains("gpus")) {
    std::fprintf(stderr, "fake-nvidia-smi: cannot read %s\n", config);
    return 2;
  }
  json* gpu = nullptr;
  for (size_t i = 0; i < script["gpus"].size(); ++i) {
    json& candidate = script["gpus"][i];
    if (candidate.value("uuid", "") == args[2] || std::to_string(i) == args[2]) gpu = &candidate;
  }
  if (gpu == nullptr) {
    std::printf("No devices were found\n");
    return 6;
  }
  const std::string bus_id = gpu->value("pci_bus_id", "00000000:00:00.0");
  std::vector<int> holders;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(config) + ".holders", error)) {
    const int pid = std::atoi(entry.path().filename().c_str());
    if (pid > 0 && Alive(pid)) holders.push_back(pid);
  }
  if (!holders.empty()) {
    std::printf(
        "The following GPUs could not be reset:\n  GPU %s: In use by another client\n\n1 device "
        "is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
        "application, graphics application such as an X server, or a monitoring application such "
        "as another instance of nvidia-smi). Please first kill all processes using this device "
        "and all compute applications running in the system.\n",
        bus_id.c_str());
    return 255;
  }
  gpu->erase("reset_required");
  gpu->erase("lost");
  // What a reset does to the counters: the volatile ECC counts (NVML fields 3, 4) and the energy
  // consumed (83) start again from 0 — which is how the engine sees a reset (docs/health.md).
  for (const char* field : {"3", "4", "83"}) {
    if (gpu->contains("fields") && (*gpu)["fields"].contains(field)) (*gpu)["fields"][field] = 0;
  }
  (*gpu)["resets"] = gpu->value("resets", 0) + 1;
  const std::string temp = std::string(config) + ".smi.tmp";
  std::ofstream(temp) << script.dump();
  std::rename(temp.c_str(), config);
  std::printf("GPU %s was successfully reset.\nAll done.\n", bus_id.c_str());
  return 0;
}
