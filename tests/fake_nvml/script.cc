// Implements the fake NVML's script helpers.
#include "fake_nvml/script.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>

namespace vigil::testing {

using nlohmann::json;

std::string FakeNvmlDir() { return VIGIL_FAKE_NVML_DIR; }
std::string FakeNvidiaSmi() { return FakeNvmlDir() + "/fake-nvidia-smi"; }

json FakeNvmlGpu(int index) {
  const std::string n = std::to_string(index);
  return {
      {"name", "NVIDIA H100 80GB HBM3"},
      {"uuid", "GPU-00000000-0000-0000-0000-00000000000" + n},
      {"serial", "165492201300" + n},
      {"pci_bus_id", "00000000:1" + n + ":00.0"},
      {"minor", index},
      {"brand", 2},
      {"values",
       {{"temperature", 40 + index},
        {"power_mw", 300'000 + index * 1000},
        {"energy_mj", 5'000'000},
        {"power_limit_mw", 700'000},
        {"enforced_power_limit_mw", 700'000},
        {"pstate", 0},
        {"sm_clock", 1980},
        {"mem_clock", 2619},
        {"max_sm_clock", 1980},
        {"max_mem_clock", 2619},
        {"clocks_event_reasons", 0},
        {"util_gpu", 87},
        {"util_memory", 41},
        {"enc_util", 0},
        {"dec_util", 0},
        {"pcie_max_gen", 5},
        {"pcie_max_width", 16},
        {"pcie_gen", 5},
        {"pcie_width", 16},
        {"memory_total", 85'520'809'984ULL},
        {"memory_used", 42ULL << 30},
        {"memory_reserved", 512ULL << 20},
        {"ecc_mode", 1},
        {"vbios", "96.00.99.00.01"},
        {"inforom",
         {{"oem", "2.1"}, {"ecc", "7.16"}, {"power", "N/A"}, {"image", "G520.0200.00.05"}}},
        {"inforom_valid", true},
        {"unrepairable", 0}}},
      {"fields",
       {{"3", 0},          {"4", 0},   {"5", 0},      {"6", 0},      {"29", 0},     {"30", 0},
        {"31", 0},         {"38", 0},  {"45", 0},     {"52", 0},     {"59", 0},     {"74", 0},
        {"75", 0},         {"76", 0},  {"77", 0},     {"78", 0},     {"79", 0},     {"82", 48},
        {"83", 5'000'000}, {"94", 0},  {"138", 1000}, {"139", 2000}, {"140", 1000}, {"141", 2000},
        {"142", 0},        {"143", 0}, {"144", 0},    {"145", 0},    {"230", 0}}},
      {"gpm",
       {{"1", 90.0},
        {"2", 50.0},
        {"3", 25.0},
        {"5", 40.0},
        {"10", 30.0},
        {"11", 0.0},
        {"12", 10.0},
        {"13", 5.0},
        {"20", 100.0},
        {"21", 200.0},
        {"60", 1000.0},
        {"61", 1000.0}}},
      // No fan on an SXM board: the fake leaves it out, so it reads NOT_SUPPORTED.
  };
}

FakeNvmlScript::FakeNvmlScript(std::string path, int gpus) : path_(std::move(path)) {
  script_ = {{"driver_version", "580.82.07"}, {"gpus", json::array()}};
  for (int i = 0; i < gpus; ++i) script_["gpus"].push_back(FakeNvmlGpu(i));
  Write();
  setenv("FAKE_NVML_CONFIG", path_.c_str(), 1);
}

void FakeNvmlScript::Write() {
  const std::string temp = path_ + ".tmp";
  std::ofstream(temp) << script_.dump();
  std::rename(temp.c_str(), path_.c_str());
  // A fake loaded in this process (a benchmark's, a backend test's) reads it at its next call.
  for (const char* driver : {"/current/libnvidia-ml.so.1", "/old/libnvidia-ml.so.1"}) {
    void* loaded = dlopen((FakeNvmlDir() + driver).c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (loaded == nullptr) continue;
    if (auto reload = reinterpret_cast<void (*)()>(dlsym(loaded, "fakeNvmlReloadNow"))) reload();
    dlclose(loaded);
  }
}

}  // namespace vigil::testing
