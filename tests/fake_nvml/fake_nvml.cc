// A fake of the NVIDIA driver's libnvidia-ml.so.1 for tests: exports the NVML entry points the
// nvml backend uses, with the C ABI of nvml.h, and answers from a JSON script named by the
// FAKE_NVML_CONFIG environment variable. The script is re-read whenever the file changes, so a
// test can lose a GPU, hang a call, change a value or queue an XID while the engine runs:
//
//   {"init_error": 0, "driver_version": "580.82.07", "nvml_version": "13.580.82.07",
//    "gpus": [{"name": "...", "uuid": "GPU-...", "serial": "...", "pci_bus_id": "...",
//              "minor": 0, "brand": 2,
//              "values": {"temperature": 40, "power_mw": 300000, ...},   // see Value() uses
//              "fields": {"82": 45, ...},    // nvmlDeviceGetFieldValues, by NVML field ID;
//                                            // {"double": 48.0}: typed as a double;
//                                            // {"mislabelled": 2}: the integer, labelled a
//                                            // double (NVML bug 2032468, nvbugs/4300930);
//                                            // {"per_second": R}: a counter growing at R; with
//                                            // values.ecc_mode 0 the ECC counters answer
//                                            // success with a value never set (the quirk)
//              "gpm": {"2": 50.0, ...},      // GPM metrics by ID (null: NaN); none: unsupported
//              "gpm_whole_call_rejection": false,  // one metric absent fails the whole call
//              "errors": {"nvmlDeviceGetFanSpeed": 3},   // a call's NVML error code
//              "hang": ["nvmlDeviceGetTemperature"],     // calls that block while listed
//              "lost": false,                             // every call: GPU_IS_LOST
//              "reset_required": false,                   // every call: RESET_REQUIRED
//              "open_error": 4,          // nvmlDeviceGetHandleByIndex's error (4: NO_PERMISSION)
//              "zero_timestamps": false, // field values stamped 0, as some drivers leave them
//              "unknown_field_ids": [230],  // answered per value with INVALID_ARGUMENT (the
//                                            // old driver: 230 by default)
//              "processes": [4242,      // compute processes' pids (_v3; _v2 on the old driver;
//                {"pid": 4343, "memory": B,    // _v3 of a driver_version 535.43 to 535.97 writes
//                 "sm_util": 40}],             // 32-byte entries, as those drivers did), 1 GiB
//                                            // each unless "memory" says (null: NOT_AVAILABLE);
//                                            // a MIG instance's own in its entry. With
//                                            // "unprivileged": true at the top, a GPU in MIG
//                                            // mode answers NO_PERMISSION for its processes.
//                                            // nvmlDeviceGetProcessUtilization samples those
//                                            // with "sm_util" (NOT_FOUND without any;
//                                            // NOT_SUPPORTED on a MIG device, or with
//                                            // "no_process_utilization": true)
//              "xids": [79, {"xid": 94, "gpu_instance": 5}],  // delivered once each, in
//                                            // order (a MIG XID with its instance: never to
//                                            // an unprivileged caller, as nvml.h says)
//              "no_mig_events": false,       // the GPU does not offer MIG-change events (the
//                                            // old driver never does)
//              "mig": {"mode": 1, "instances": [   // MIG mode and the MIG devices, by index
//                {"gpu_instance": 1, "compute_instance": 0, "profile": "1g.10gb",
//                 "uuid": "MIG-...", "placement": [0, 1], "memory_total": B, "memory_used": B,
//                 "gpm": {"1": 20.0}}]}}]}   // the instance's GPM metrics (nvmlGpmMigSampleGet)
//
// A value or field the script omits answers NOT_SUPPORTED. Built twice: as a current driver, and
// with FAKE_NVML_OLD_DRIVER as an older one that lacks some entry points (GPM, memory info v2,
// clocks event reasons, the unrepairable-memory flag, the versioned temperature).
//
// Thread-safety: every entry point may be called from any thread (as NVML's may); one mutex
// guards the script, and a hanging call waits without holding it.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/nvml_api.h"
#include "nlohmann/json.hpp"

namespace nv = vigil::nvml;
using nlohmann::json;

struct vigil::nvml::nvmlDevice_st {
  int index;          // the GPU's (a MIG device's parent's)
  int mig_slot = -1;  // a MIG device: its index among the GPU's MIG devices
};
struct vigil::nvml::nvmlGpuInstance_st {
  int gpu;
  int slot;  // the MIG device of this GPU instance
};
struct vigil::nvml::nvmlEventSet_st {
  unsigned generation;  // of the initialisation it was made in: dead after an nvmlShutdown
  // One entry per registration: a GPU for XIDs, or for MIG-change events.
  std::vector<int> devices;
  std::vector<unsigned long long> types;
  // Each registration's GPU's MIG layout when it was made: a MIG reconfiguration leaves an XID
  // registration stale (it delivers nothing more for that GPU) until the GPU is registered again.
  // A MIG-change registration delivers one event per change, then holds the new layout.
  std::vector<std::string> mig_layouts;
  // A registration that answered UNKNOWN leaves the set undefined (the driver's quirk): it
  // delivers nothing any more.
  bool broken = false;
};
struct vigil::nvml::nvmlGpmSample_st {
  int gpu_instance = -1;  // taken by nvmlGpmMigSampleGet: that GPU instance's metrics
  int gpu = -1;
};

namespace {

constexpr int kMaxGpus = 64;
constexpr int kMaxMigDevices = 7;

std::mutex g_mutex;
json g_script;                 // guarded by g_mutex
struct timespec g_mtime = {};  // of the script as loaded
// The script's inode as loaded: the tests replace the file by a rename, so a new version is a new
// inode even when both writes fall within one tick of the file system's coarse clock (same mtime).
ino_t g_inode = 0;
long long g_last_check_ns = 0;                              // when the file was last stat'ed
nv::nvmlDevice_st g_devices[kMaxGpus];                      // handles; index fixed
nv::nvmlDevice_st g_mig_devices[kMaxGpus][kMaxMigDevices];  // MIG device handles
nv::nvmlGpuInstance_st g_gpu_instances[kMaxGpus][kMaxMigDevices];
size_t g_xids_delivered[kMaxGpus] = {};  // per GPU, guarded by g_mutex
std::atomic<long long> g_call_nanos{0};  // CPU time spent inside timed entry points
std::atomic<long long> g_calls{0};       // timed entry points called
bool g_initialised = false;
// NVML's initialisation is counted: nvmlShutdown undoes one nvmlInit, and the last releases the
// driver. While initialised the process is a holder of the GPUs, recorded as
// <FAKE_NVML_CONFIG>.holders/<pid> for fake-nvidia-smi, which refuses a reset while any live
// holder remains (as the driver refuses it while a client holds the GPU).
int g_init_count = 0;       // guarded by g_mutex
unsigned g_generation = 0;  // initialisations from nothing so far; guarded by g_mutex
std::string g_holder_file;  // guarded by g_mutex

void AddHolder() {
  const char* config = std::getenv("FAKE_NVML_CONFIG");
  if (config == nullptr) return;
  const std::string dir = std::string(config) + ".holders";
  mkdir(dir.c_str(), 0755);
  g_holder_file = dir + "/" + std::to_string(getpid());
  std::ofstream(g_holder_file) << "libnvidia-ml\n";
}

long long NowNanos() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

// Re-reads the script when its file changed; checks at most every 5 ms. Needs g_mutex.
void MaybeReload() {
  const long long now = NowNanos();
  if (now - g_last_check_ns < 5'000'000 && !g_script.is_null()) return;
  g_last_check_ns = now;
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  if (path == nullptr) {
    std::fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_CONFIG is not set\n");
    std::abort();
  }
  struct stat info;
  if (stat(path, &info) != 0) {
    std::fprintf(stderr, "fake libnvidia-ml: cannot stat %s\n", path);
    std::abort();
  }
  if (!g_script.is_null() && info.st_mtim.tv_sec == g_mtime.tv_sec &&
      info.st_mtim.tv_nsec == g_mtime.tv_nsec && info.st_ino == g_inode) {
    return;
  }
  std::ifstream in(path);
  json parsed = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return;  // caught mid-write: keep the old script, retry later
  g_script = std::move(parsed);
  g_mtime = info.st_mtim;
  g_inode = info.st_ino;
}

const json& Gpus() { return g_script["gpus"]; }

// The script entry of a handle, or null.
const json* GpuOf(nv::Device device) {
  if (device == nullptr) return nullptr;
  const int index = device->index;
  if (index < 0 || static_cast<size_t>(index) >= Gpus().size()) return nullptr;
  return &Gpus()[index];
}

// The script entry of a MIG device handle's instance, or null (a GPU's handle, or a MIG device
// the script no longer lists).
const json* InstanceOf(const json& gpu, nv::Device device) {
  if (device->mig_slot < 0 || !gpu.contains("mig") || !gpu["mig"].contains("instances")) {
    return nullptr;
  }
  const json& instances = gpu["mig"]["instances"];
  if (static_cast<size_t>(device->mig_slot) >= instances.size()) return nullptr;
  return &instances[device->mig_slot];
}

bool Listed(const json& gpu, const char* key, const char* call) {
  if (!gpu.contains(key)) return false;
  for (const json& name : gpu[key]) {
    if (name == call) return true;
  }
  return false;
}

long long ThreadCpuNanos() {
  struct timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

// Counts the CPU time an entry point takes on its thread (for the benchmark's "our overhead"
// figure: the engine's CPU time less the library's).
class Timed {
 public:
  Timed() : start_(ThreadCpuNanos()) {}
  ~Timed() {
    g_call_nanos.fetch_add(ThreadCpuNanos() - start_, std::memory_order_relaxed);
    g_calls.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  long long start_;
};

// The common path of a per-device call: reload, find the GPU, hang while the script says so,
// then the scripted error if any, else body(gpu) under the lock.
template <typename Body>
nv::Return DeviceCall(const char* call, nv::Device device, Body body) {
  std::unique_lock<std::mutex> lock(g_mutex);
  if (!g_initialised) return nv::kErrorUninitialized;
  MaybeReload();
  for (;;) {
    const json* gpu = GpuOf(device);
    if (gpu == nullptr) return nv::kErrorInvalidArgument;
    if (!Listed(*gpu, "hang", call)) break;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    lock.lock();
    MaybeReload();
  }
  const json& gpu = *GpuOf(device);
  if (gpu.value("lost", false)) return nv::kErrorGpuIsLost;
  if (gpu.value("reset_required", false)) return nv::kErrorResetRequired;
  if (gpu.contains("errors") && gpu["errors"].contains(call)) {
    return gpu["errors"][call].get<int>();
  }
  return body(gpu);
}

template <typename T>
nv::Return Value(const json& gpu, const char* key, T* out) {
  if (out == nullptr) return nv::kErrorInvalidArgument;
  if (!gpu.contains("values") || !gpu["values"].contains(key)) return nv::kErrorNotSupported;
  *out = gpu["values"][key].get<T>();
  return nv::kSuccess;
}

// An entry point that answers one scripted value: `call`'s common path, then values[key].
template <typename T>
nv::Return ScriptedValue(const char* call, nv::Device device, const char* key, T* out) {
  Timed timed;
  return DeviceCall(call, device, [&](const json& gpu) { return Value(gpu, key, out); });
}

nv::Return CopyString(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return nv::kErrorInvalidArgument;
  if (text.size() + 1 > length) return nv::kErrorInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return nv::kSuccess;
}

nv::Return StringOf(const json& gpu, const char* key, char* out, unsigned int length) {
  if (!gpu.contains(key)) return nv::kErrorNotSupported;
  return CopyString(gpu[key].get<std::string>(), out, length);
}

// The scripted memory figures, in bytes, as nvmlMemory_v2_t has them: the GPU's values, or a MIG
// device's own (its instance entry's memory_total, memory_used).
nv::Return ScriptedMemory(const json& gpu, nv::Device device, nv::MemoryV2* memory) {
  unsigned long long total = 0, used = 0, reserved = 0;
  if (const json* instance = InstanceOf(gpu, device)) {
    if (!instance->contains("memory_total")) return nv::kErrorNotSupported;
    total = (*instance)["memory_total"].get<unsigned long long>();
    used = instance->value("memory_used", 0ULL);
  } else {
    if (nv::Return r = Value(gpu, "memory_total", &total); r != nv::kSuccess) return r;
    Value(gpu, "memory_used", &used);
    Value(gpu, "memory_reserved", &reserved);
  }
  memory->total = total;
  memory->reserved = reserved;
  memory->used = used;
  memory->free = total - used - reserved;
  return nv::kSuccess;
}

}  // namespace

extern "C" {

// Not NVML: let a benchmark subtract the fake's own CPU time from the engine's.
long long fakeNvmlCallNanos() { return g_call_nanos.load(std::memory_order_relaxed); }
long long fakeNvmlCalls() { return g_calls.load(std::memory_order_relaxed); }
// The script is read again at the next call, however soon (a test in this process that has just
// rewritten it; others see it within 5 ms).
void fakeNvmlReloadNow() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_last_check_ns = std::numeric_limits<long long>::min() / 2;
  g_mtime = {};  // two writes within the file system's timestamp granularity look alike
}

nv::Return nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(g_mutex);
  MaybeReload();
  const int error = g_script.value("init_error", 0);
  if (error != 0) return error;
  if (g_init_count++ > 0) return nv::kSuccess;
  ++g_generation;
  AddHolder();
  for (int i = 0; i < kMaxGpus; ++i) {
    g_devices[i].index = i;
    for (int slot = 0; slot < kMaxMigDevices; ++slot) {
      g_mig_devices[i][slot] = {.index = i, .mig_slot = slot};
      g_gpu_instances[i][slot] = {.gpu = i, .slot = slot};
    }
  }
  g_initialised = true;
  return nv::kSuccess;
}
nv::Return nvmlInit() { return nvmlInit_v2(); }

nv::Return nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count == 0) return nv::kErrorUninitialized;
  if (--g_init_count > 0) return nv::kSuccess;
  g_initialised = false;
  if (!g_holder_file.empty()) std::remove(g_holder_file.c_str());
  g_holder_file.clear();
  return nv::kSuccess;
}

const char* nvmlErrorString(nv::Return result) {
  switch (result) {
    case nv::kSuccess:
      return "Success";
    case nv::kErrorUninitialized:
      return "Uninitialized";
    case nv::kErrorInvalidArgument:
      return "Invalid Argument";
    case nv::kErrorNotSupported:
      return "Not Supported";
    case nv::kErrorNoPermission:
      return "Insufficient Permissions";
    case nv::kErrorDriverNotLoaded:
      return "Driver Not Loaded";
    case nv::kErrorTimeout:
      return "Timeout";
    case nv::kErrorGpuIsLost:
      return "GPU is lost";
    case nv::kErrorResetRequired:
      return "GPU requires reset";
    default:
      return "Unknown Error";
  }
}

nv::Return nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return CopyString(g_script.value("driver_version", "580.82.07"), version, length);
}

nv::Return nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return CopyString(g_script.value("nvml_version", "13.580.82.07"), version, length);
}

nv::Return nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_initialised) return nv::kErrorUninitialized;
  MaybeReload();
  *count = static_cast<unsigned int>(std::min<size_t>(Gpus().size(), kMaxGpus));
  return nv::kSuccess;
}

nv::Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, nv::Device* device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_initialised) return nv::kErrorUninitialized;
  MaybeReload();
  if (index >= Gpus().size() || index >= kMaxGpus) return nv::kErrorInvalidArgument;
  if (Gpus()[index].value("open_error", 0) != 0) return Gpus()[index]["open_error"].get<int>();
  *device = &g_devices[index];
  return nv::kSuccess;
}

nv::Return nvmlDeviceGetName(nv::Device device, char* name, unsigned int length) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    // A MIG device is named after its GPU and profile, as the driver names it.
    if (const json* instance = InstanceOf(gpu, device)) {
      return CopyString(gpu.value("name", "") + " MIG " + instance->value("profile", ""), name,
                        length);
    }
    return StringOf(gpu, "name", name, length);
  });
}

nv::Return nvmlDeviceGetBrand(nv::Device device, int* brand) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (!gpu.contains("brand")) return nv::kErrorNotSupported;
    *brand = gpu["brand"].get<int>();
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetSerial(nv::Device device, char* serial, unsigned int length) {
  Timed timed;
  return DeviceCall(__func__, device,
                    [&](const json& gpu) { return StringOf(gpu, "serial", serial, length); });
}

nv::Return nvmlDeviceGetUUID(nv::Device device, char* uuid, unsigned int length) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (const json* instance = InstanceOf(gpu, device))
      return StringOf(*instance, "uuid", uuid, length);
    return StringOf(gpu, "uuid", uuid, length);
  });
}

nv::Return nvmlDeviceGetMinorNumber(nv::Device device, unsigned int* minor) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    *minor = gpu.value("minor", static_cast<unsigned int>(device->index));
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetPciInfo_v3(nv::Device device, nv::PciInfo* pci) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    *pci = {};
    return StringOf(gpu, "pci_bus_id", pci->bus_id, sizeof(pci->bus_id));
  });
}

nv::Return nvmlDeviceValidateInforom(nv::Device device) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    bool valid = true;
    if (Value(gpu, "inforom_valid", &valid) != nv::kSuccess) return nv::kErrorNotSupported;
    return valid ? nv::kSuccess : nv::kErrorCorruptedInforom;
  });
}

nv::Return nvmlDeviceGetVbiosVersion(nv::Device device, char* version, unsigned int length) {
  Timed timed;
  return DeviceCall(__func__, device,
                    [&](const json& gpu) { return StringOf(gpu, "vbios", version, length); });
}

// values.inforom: {"oem": "2.1", "ecc": "7.16", "power": "N/A", "image": "G520.0200.00.05"}.
static const json* InforomOf(const json& gpu) {
  if (!gpu.contains("values") || !gpu["values"].contains("inforom")) return nullptr;
  return &gpu["values"]["inforom"];
}

nv::Return nvmlDeviceGetInforomVersion(nv::Device device, int object, char* version,
                                       unsigned int length) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    static constexpr const char* kObjects[] = {"oem", "ecc", "power"};
    if (object < 0 || object > 2) return nv::kErrorInvalidArgument;
    const json* inforom = InforomOf(gpu);
    if (inforom == nullptr) return nv::kErrorNotSupported;
    return StringOf(*inforom, kObjects[object], version, length);
  });
}

nv::Return nvmlDeviceGetInforomImageVersion(nv::Device device, char* version, unsigned int length) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    const json* inforom = InforomOf(gpu);
    if (inforom == nullptr) return nv::kErrorNotSupported;
    return StringOf(*inforom, "image", version, length);
  });
}

nv::Return nvmlDeviceGetClockInfo(nv::Device device, int type, unsigned int* clock) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    return Value(gpu, type == nv::kClockSm ? "sm_clock" : "mem_clock", clock);
  });
}

nv::Return nvmlDeviceGetMaxClockInfo(nv::Device device, int type, unsigned int* clock) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    return Value(gpu, type == nv::kClockSm ? "max_sm_clock" : "max_mem_clock", clock);
  });
}

nv::Return nvmlDeviceGetCurrentClocksThrottleReasons(nv::Device device,
                                                     unsigned long long* reasons) {
  return ScriptedValue(__func__, device, "clocks_event_reasons", reasons);
}

#ifndef FAKE_NVML_OLD_DRIVER
nv::Return nvmlDeviceGetCurrentClocksEventReasons(nv::Device device, unsigned long long* reasons) {
  return ScriptedValue(__func__, device, "clocks_event_reasons", reasons);
}
#endif

nv::Return nvmlDeviceGetTemperature(nv::Device device, int sensor, unsigned int* temperature) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (sensor != nv::kTemperatureGpu) return nv::kErrorInvalidArgument;
    return Value(gpu, "temperature", temperature);
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
nv::Return nvmlDeviceGetTemperatureV(nv::Device device, nv::TemperatureV1* temperature) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (temperature->version != nv::kTemperatureV1Version) {
      return nv::kErrorArgumentVersionMismatch;
    }
    if (temperature->sensor_type != nv::kTemperatureGpu) return nv::kErrorInvalidArgument;
    return Value(gpu, "temperature", &temperature->temperature);
  });
}
#endif

nv::Return nvmlDeviceGetPowerUsage(nv::Device device, unsigned int* milliwatts) {
  return ScriptedValue(__func__, device, "power_mw", milliwatts);
}

nv::Return nvmlDeviceGetTotalEnergyConsumption(nv::Device device, unsigned long long* mj) {
  return ScriptedValue(__func__, device, "energy_mj", mj);
}

nv::Return nvmlDeviceGetPowerManagementLimit(nv::Device device, unsigned int* milliwatts) {
  return ScriptedValue(__func__, device, "power_limit_mw", milliwatts);
}

nv::Return nvmlDeviceGetEnforcedPowerLimit(nv::Device device, unsigned int* milliwatts) {
  return ScriptedValue(__func__, device, "enforced_power_limit_mw", milliwatts);
}

nv::Return nvmlDeviceGetPerformanceState(nv::Device device, int* pstate) {
  return ScriptedValue(__func__, device, "pstate", pstate);
}

nv::Return nvmlDeviceGetFanSpeed(nv::Device device, unsigned int* speed) {
  return ScriptedValue(__func__, device, "fan_speed", speed);
}

nv::Return nvmlDeviceGetUtilizationRates(nv::Device device, nv::Utilization* utilization) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (nv::Return r = Value(gpu, "util_gpu", &utilization->gpu); r != nv::kSuccess) return r;
    return Value(gpu, "util_memory", &utilization->memory);
  });
}

nv::Return nvmlDeviceGetEncoderUtilization(nv::Device device, unsigned int* utilization,
                                           unsigned int* period_us) {
  *period_us = 1'000'000;
  return ScriptedValue(__func__, device, "enc_util", utilization);
}

nv::Return nvmlDeviceGetDecoderUtilization(nv::Device device, unsigned int* utilization,
                                           unsigned int* period_us) {
  *period_us = 1'000'000;
  return ScriptedValue(__func__, device, "dec_util", utilization);
}

nv::Return nvmlDeviceGetMaxPcieLinkGeneration(nv::Device device, unsigned int* value) {
  return ScriptedValue(__func__, device, "pcie_max_gen", value);
}

nv::Return nvmlDeviceGetMaxPcieLinkWidth(nv::Device device, unsigned int* value) {
  return ScriptedValue(__func__, device, "pcie_max_width", value);
}

nv::Return nvmlDeviceGetCurrPcieLinkGeneration(nv::Device device, unsigned int* value) {
  return ScriptedValue(__func__, device, "pcie_gen", value);
}

nv::Return nvmlDeviceGetCurrPcieLinkWidth(nv::Device device, unsigned int* value) {
  return ScriptedValue(__func__, device, "pcie_width", value);
}

nv::Return nvmlDeviceGetMemoryInfo(nv::Device device, nv::Memory* memory) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    nv::MemoryV2 v2{};
    const nv::Return r = ScriptedMemory(gpu, device, &v2);
    // Version 1 has no reserved figure and counts it as used.
    *memory = {.total = v2.total, .free = v2.free, .used = v2.used + v2.reserved};
    return r;
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
nv::Return nvmlDeviceGetMemoryInfo_v2(nv::Device device, nv::MemoryV2* memory) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (memory->version != nv::kMemoryV2Version) return nv::kErrorArgumentVersionMismatch;
    return ScriptedMemory(gpu, device, memory);
  });
}

// The script entry's "fabric": {"state": 3, "status": 0, "health_mask": 0, "summary": 1,
// "v2_only": false}; none: a GPU without a fabric (NOT_SUPPORTED).
nv::Return nvmlDeviceGetGpuFabricInfoV(nv::Device device, nv::GpuFabricInfoV3* info) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (!gpu.contains("fabric")) return nv::kErrorNotSupported;
    const json& fabric = gpu["fabric"];
    const bool v2_only = fabric.value("v2_only", false);
    if (info->version != nv::kGpuFabricInfoV2Version &&
        (info->version != nv::kGpuFabricInfoV3Version || v2_only)) {
      return nv::kErrorArgumentVersionMismatch;
    }
    info->state = fabric.value("state", nv::kGpuFabricStateCompleted);
    info->status = fabric.value("status", 0);
    info->clique_id = fabric.value("clique_id", 0u);
    info->health_mask = fabric.value("health_mask", 0u);
    if (info->version == nv::kGpuFabricInfoV3Version) {
      info->health_summary = fabric.value("summary", static_cast<unsigned char>(1));
    }
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetUnrepairableMemoryFlag_v1(nv::Device device,
                                                  nv::UnrepairableMemoryStatusV1* status) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    return Value(gpu, "unrepairable", &status->unrepairable_memory);
  });
}
#endif

nv::Return nvmlDeviceGetEccMode(nv::Device device, int* current, int* pending) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    nv::Return r = Value(gpu, "ecc_mode", current);
    *pending = *current;
    return r;
  });
}

// nvmlProcessInfo_v3_t: what drivers 535.43.02 to 535.86.x wrote from _v3 (nvml_api.h).
struct ProcessInfoCc {
  nv::ProcessInfo info;
  unsigned long long used_gpu_cc_protected_memory;
};
static_assert(sizeof(ProcessInfoCc) == 32);

// Whether the scripted driver is one of those.
static bool WritesCcEntries() {
  unsigned int branch = 0;
  unsigned int release = 0;
  const std::string version = g_script.value("driver_version", "580.82.07");
  return std::sscanf(version.c_str(), "%u.%u", &branch, &release) == 2 && branch == 535 &&
         release >= 43 && release < 98;
}

// nvmlDeviceGetComputeRunningProcesses_v3 (_v2 on the old driver: the same struct, but see
// ProcessInfoCc): fills up to *count entries; too few sets *count to the number needed and
// answers INSUFFICIENT_SIZE.
static nv::Return ComputeProcesses(const char* name, nv::Device device, unsigned int* count,
                                   nv::ProcessInfo* infos, bool v3) {
  Timed timed;
  return DeviceCall(name, device, [&](const json& gpu) {
    const json* instance = InstanceOf(gpu, device);
    const bool mig = gpu.contains("mig") && gpu["mig"].value("mode", 0) == 1;
    // In MIG mode the GPU's handle answers for its instances only to a privileged caller
    // (nvml.h); "unprivileged": true at the top makes this process one that is not.
    if (instance == nullptr && mig && g_script.value("unprivileged", false)) {
      return nv::kErrorNoPermission;
    }
    const json processes = instance != nullptr ? instance->value("processes", json::array())
                                               : gpu.value("processes", json::array());
    const unsigned int have = static_cast<unsigned int>(processes.size());
    if (*count < have) {
      *count = have;
      return nv::kErrorInsufficientSize;
    }
    *count = have;
    const bool cc = v3 && WritesCcEntries();
    for (unsigned int i = 0; i < have; ++i) {
      const json& process = processes[i];
      const bool object = process.is_object();
      unsigned long long memory = 1ull << 30;
      if (object && process.contains("memory")) {
        memory = process["memory"].is_null() ? ~0ull : process["memory"].get<unsigned long long>();
      }
      const nv::ProcessInfo info{
          .pid = object ? process["pid"].get<unsigned int>() : process.get<unsigned int>(),
          .used_gpu_memory = memory,
          .gpu_instance_id = instance != nullptr
                                 ? static_cast<unsigned int>(instance->value("gpu_instance", 0))
                                 : 0xFFFFFFFFu,
          .compute_instance_id = 0xFFFFFFFFu};
      if (cc) {
        // 0: no protected memory, so a reader that takes entries of 24 bytes sees pid 0.
        reinterpret_cast<ProcessInfoCc*>(infos)[i] = {info, 0};
      } else {
        infos[i] = info;
      }
    }
    return nv::kSuccess;
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
nv::Return nvmlDeviceGetComputeRunningProcesses_v3(nv::Device device, unsigned int* count,
                                                   nv::ProcessInfo* infos) {
  return ComputeProcesses(__func__, device, count, infos, /*v3=*/true);
}
#else
nv::Return nvmlDeviceGetComputeRunningProcesses_v2(nv::Device device, unsigned int* count,
                                                   nv::ProcessInfo* infos) {
  return ComputeProcesses(__func__, device, count, infos, /*v3=*/false);
}
#endif

// The processes of the script with "sm_util", one sample each, stamped after lastSeenTimeStamp.
nv::Return nvmlDeviceGetProcessUtilization(nv::Device device, nv::ProcessUtilizationSample* samples,
                                           unsigned int* count, unsigned long long last_seen) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (InstanceOf(gpu, device) != nullptr || gpu.value("no_process_utilization", false)) {
      return nv::kErrorNotSupported;
    }
    std::vector<nv::ProcessUtilizationSample> have;
    for (const json& process : gpu.value("processes", json::array())) {
      if (!process.is_object() || !process.contains("sm_util")) continue;
      have.push_back({.pid = process["pid"].get<unsigned int>(),
                      .time_stamp = last_seen + 1,
                      .sm_util = process["sm_util"].get<unsigned int>()});
    }
    if (have.empty()) {
      *count = 0;
      return nv::kErrorNotFound;
    }
    if (samples == nullptr || *count < have.size()) {
      *count = static_cast<unsigned int>(have.size());
      return nv::kErrorInsufficientSize;
    }
    *count = static_cast<unsigned int>(have.size());
    std::copy(have.begin(), have.end(), samples);
    return nv::kSuccess;
  });
}

// A GPU's MIG layout as the event registrations remember it: its instances' ids and UUIDs.
static std::string MigLayout(const json& gpu) {
  std::string layout;
  if (!gpu.contains("mig") || gpu["mig"].value("mode", 0) != 1) return layout;
  for (const json& instance : gpu["mig"].value("instances", json::array())) {
    layout +=
        std::to_string(instance.value("gpu_instance", 0)) + "/" + instance.value("uuid", "") + ";";
  }
  return layout;
}

// Whether `gpu`'s driver predates NVML field `field_id`: the script's "unknown_field_ids", else
// (the old driver) the GPU recovery action, 230, which R575 added.
static bool UnknownFieldId(const json& gpu, unsigned int field_id) {
  if (gpu.contains("unknown_field_ids")) {
    for (const json& id : gpu["unknown_field_ids"]) {
      if (id.get<unsigned int>() == field_id) return true;
    }
    return false;
  }
#ifdef FAKE_NVML_OLD_DRIVER
  return field_id == nv::kFiGpuRecoveryAction;
#else
  return false;
#endif
}

nv::Return nvmlDeviceGetFieldValues(nv::Device device, int count, nv::FieldValue* values) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    const bool zero_timestamps = gpu.value("zero_timestamps", false);
    for (int i = 0; i < count; ++i) {
      nv::FieldValue& value = values[i];
      const std::string key = std::to_string(value.field_id);
      const long long now_us = NowNanos() / 1000;
      // Some drivers leave the timestamp 0 (DCGM substitutes the time of the read).
      value.timestamp = zero_timestamps ? 0 : now_us;
      if (UnknownFieldId(gpu, value.field_id)) {
        // A field id the driver does not know fails that value alone, the call succeeding.
        value.nvml_return = nv::kErrorInvalidArgument;
        continue;
      }
      const bool ecc_counter =
          value.field_id >= nv::kFiEccSbeVolTotal && value.field_id <= nv::kFiEccDbeAggTotal;
      if (ecc_counter && gpu.contains("values") && gpu["values"].value("ecc_mode", 1) == 0) {
        // The driver's quirk with ECC off: success, and a value it never set.
        value.nvml_return = nv::kSuccess;
        value.value_type = nv::kValueTypeUnsignedLongLong;
        value.value.ull_val = 0xdeadbeefdeadbeefull;
        continue;
      }
      const bool nvlink_data = value.field_id == nv::kFiNvlinkThroughputDataTx ||
                               value.field_id == nv::kFiNvlinkThroughputDataRx;
      if (!gpu.contains("fields") || !gpu["fields"].contains(key) ||
          (nvlink_data && value.scope_id != nv::kScopeAllLinks)) {
        // The fake's NVLink data counters are the totals over all links: asked for one link
        // (scopeId 0 is link 0 only), they are not what the script holds.
        value.nvml_return = nv::kErrorNotSupported;
        continue;
      }
      value.nvml_return = nv::kSuccess;
      const json& scripted = gpu["fields"][key];
      if (scripted.is_object() && scripted.contains("per_second")) {
        // A counter growing at that rate (KiB/s for the NVLink data counters), on the clock
        // that stamps the answer.
        value.value_type = nv::kValueTypeUnsignedLongLong;
        value.value.ull_val = static_cast<unsigned long long>(scripted["per_second"].get<double>() *
                                                              static_cast<double>(now_us) / 1e6);
        continue;
      }
      if (scripted.is_object() && scripted.contains("mislabelled")) {
        // The driver's bug: an integer stored as such, its value type left at 0 (double).
        value.value_type = nv::kValueTypeDouble;
        value.value.ull_val = scripted["mislabelled"].get<unsigned long long>();
        continue;
      }
      if (scripted.is_object() && scripted.contains("double")) {
        // Typed as a double where an integer is expected (some drivers, some fields).
        value.value_type = nv::kValueTypeDouble;
        value.value.d_val = scripted["double"].get<double>();
        continue;
      }
      value.value_type = nv::kValueTypeUnsignedLongLong;
      value.value.ull_val = scripted.get<unsigned long long>();
    }
    return nv::kSuccess;
  });
}

nv::Return nvmlEventSetCreate(nv::EventSet* set) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_initialised) return nv::kErrorUninitialized;
  *set = new nv::nvmlEventSet_st{.generation = g_generation, .devices = {}};
  return nv::kSuccess;
}

namespace {

// The event types a GPU offers: XIDs always; MIG changes on a current driver unless scripted off.
unsigned long long SupportedEventTypes(const json& gpu) {
  unsigned long long types = nv::kEventTypeXidCriticalError;
#ifndef FAKE_NVML_OLD_DRIVER
  if (!gpu.value("no_mig_events", false)) types |= nv::kEventMigConfigChange;
#else
  (void)gpu;
#endif
  return types;
}

}  // namespace

nv::Return nvmlDeviceGetSupportedEventTypes(nv::Device device, unsigned long long* types) {
  return DeviceCall(__func__, device, [&](const json& gpu) {
    *types = SupportedEventTypes(gpu);
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceRegisterEvents(nv::Device device, unsigned long long types, nv::EventSet set) {
  const nv::Return code = DeviceCall(__func__, device, [&](const json& gpu) {
    if (set->generation != g_generation) return nv::kErrorUninitialized;  // made before a shutdown
    if (types == 0 || (types & ~SupportedEventTypes(gpu)) != 0) return nv::kErrorNotSupported;
    for (unsigned long long type : {nv::kEventTypeXidCriticalError, nv::kEventMigConfigChange}) {
      if ((types & type) == 0) continue;
      set->devices.push_back(device->index);
      set->types.push_back(type);
      set->mig_layouts.push_back(MigLayout(Gpus()[device->index]));
    }
    return nv::kSuccess;
  });
  if (code == nv::kErrorUnknown) set->broken = true;
  return code;
}

nv::Return nvmlEventSetWait_v2(nv::EventSet set, nv::EventData* data, unsigned int timeout_ms) {
  const long long deadline = NowNanos() + timeout_ms * 1'000'000LL;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      // A set made before NVML was shut down is gone with that initialisation.
      if (!g_initialised || set->generation != g_generation) return nv::kErrorUninitialized;
      MaybeReload();
      // A registered GPU that fell off the bus fails every wait on the set (as NVML may).
      for (size_t registration = 0; !set->broken && registration < set->devices.size();
           ++registration) {
        if (Gpus()[set->devices[registration]].value("lost", false)) return nv::kErrorGpuIsLost;
      }
      for (size_t registration = 0; !set->broken && registration < set->devices.size();
           ++registration) {
        const int index = set->devices[registration];
        const json& gpu = Gpus()[index];
        const std::string layout = MigLayout(gpu);
        if (set->types[registration] == nv::kEventMigConfigChange) {
          if (layout == set->mig_layouts[registration]) continue;
          set->mig_layouts[registration] = layout;  // one event per change
          *data = {};
          data->device = &g_devices[index];
          data->event_type = nv::kEventMigConfigChange;
          data->gpu_instance_id = 0xFFFFFFFF;
          data->compute_instance_id = 0xFFFFFFFF;
          return nv::kSuccess;
        }
        if (layout != set->mig_layouts[registration]) continue;  // stale
        if (!gpu.contains("xids") || g_xids_delivered[index] >= gpu["xids"].size()) continue;
        // A code, or {"xid": CODE, "gpu_instance": GI, "compute_instance": CI} (MIG).
        const json& entry = gpu["xids"][g_xids_delivered[index]++];
        // In MIG mode an instance's events reach only a privileged caller; others get just the
        // events that affect the whole GPU (nvml.h, nvmlEventSetWait_v2).
        if (entry.is_object() && entry.contains("gpu_instance") &&
            g_script.value("unprivileged", false)) {
          continue;
        }
        *data = {};
        data->device = &g_devices[index];
        data->event_type = nv::kEventTypeXidCriticalError;
        data->gpu_instance_id = 0xFFFFFFFF;
        data->compute_instance_id = 0xFFFFFFFF;
        if (entry.is_object()) {
          data->event_data = entry.value("xid", 0ull);
          data->gpu_instance_id = entry.value("gpu_instance", 0xFFFFFFFFu);
          data->compute_instance_id = entry.value("compute_instance", 0xFFFFFFFFu);
        } else {
          data->event_data = entry.get<unsigned long long>();
        }
        return nv::kSuccess;
      }
    }
    if (NowNanos() >= deadline) return nv::kErrorTimeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

nv::Return nvmlEventSetFree(nv::EventSet set) {
  delete set;
  return nv::kSuccess;
}

#ifndef FAKE_NVML_OLD_DRIVER
nv::Return nvmlGpmQueryDeviceSupport(nv::Device device, nv::GpmSupport* support) {
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (support->version != nv::kGpmSupportVersion) return nv::kErrorArgumentVersionMismatch;
    support->is_supported_device = gpu.contains("gpm") ? 1 : 0;
    return nv::kSuccess;
  });
}

nv::Return nvmlGpmSampleAlloc(nv::GpmSample* sample) {
  sample->handle = new nv::nvmlGpmSample_st();
  return nv::kSuccess;
}

nv::Return nvmlGpmSampleFree(nv::GpmSample sample) {
  delete sample.handle;
  return nv::kSuccess;
}

nv::Return nvmlGpmSampleGet(nv::Device device, nv::GpmSample sample) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json&) {
    if (sample.handle == nullptr) return nv::kErrorInvalidArgument;
    *sample.handle = {};
    return nv::kSuccess;
  });
}

nv::Return nvmlGpmMigSampleGet(nv::Device device, unsigned int gpu_instance_id,
                               nv::GpmSample sample) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (sample.handle == nullptr || !gpu.contains("mig")) return nv::kErrorInvalidArgument;
    for (const json& instance : gpu["mig"].value("instances", json::array())) {
      if (instance.value("gpu_instance", 0u) == gpu_instance_id) {
        *sample.handle = {.gpu_instance = static_cast<int>(gpu_instance_id), .gpu = device->index};
        return nv::kSuccess;
      }
    }
    return nv::kErrorNotFound;
  });
}

// Answers from the script of the first GPU whose "gpm" is present: the fake's samples do not
// remember their device, and the tests give every GPU the same metrics.
nv::Return nvmlGpmMetricsGet(nv::GpmMetricsGet* request) {
  Timed timed;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (request->version != nv::kGpmMetricsGetVersion) return nv::kErrorArgumentVersionMismatch;
  if (request->sample1.handle == nullptr || request->sample2.handle == nullptr) {
    return nv::kErrorInvalidArgument;
  }
  const json* metrics = nullptr;
  bool whole_call_rejection = false;  // the GPU's "gpm_whole_call_rejection"
  for (const json& gpu : Gpus()) {
    if (gpu.contains("gpm")) {
      metrics = &gpu["gpm"];
      whole_call_rejection = gpu.value("gpm_whole_call_rejection", false);
      break;
    }
  }
  // Samples of a GPU instance: that instance's metrics (none scripted: not supported).
  if (const nv::nvmlGpmSample_st& taken = *request->sample2.handle; taken.gpu_instance >= 0) {
    metrics = nullptr;
    if (static_cast<size_t>(taken.gpu) < Gpus().size()) {
      whole_call_rejection = Gpus()[taken.gpu].value("gpm_whole_call_rejection", false);
    }
    if (static_cast<size_t>(taken.gpu) < Gpus().size() && Gpus()[taken.gpu].contains("mig") &&
        Gpus()[taken.gpu]["mig"].contains("instances")) {
      for (const json& instance : Gpus()[taken.gpu]["mig"]["instances"]) {  // not a copy: kept
        if (instance.value("gpu_instance", -1) == taken.gpu_instance && instance.contains("gpm")) {
          metrics = &instance["gpm"];
        }
      }
    }
  }
  // Some drivers fail the whole call when one metric is not there for the GPU or instance.
  for (unsigned int i = 0; whole_call_rejection && i < request->num_metrics; ++i) {
    if (metrics == nullptr || !metrics->contains(std::to_string(request->metrics[i].metric_id))) {
      return nv::kErrorNotSupported;
    }
  }
  for (unsigned int i = 0; i < request->num_metrics && i < nv::kGpmMetricMax; ++i) {
    nv::GpmMetric& metric = request->metrics[i];
    const std::string key = std::to_string(metric.metric_id);
    if (metrics == nullptr || !metrics->contains(key)) {
      metric.nvml_return = nv::kErrorNotSupported;
      continue;
    }
    metric.nvml_return = nv::kSuccess;
    // null: NaN, which real drivers return for some metrics at times (DCGM guards against it).
    metric.value = (*metrics)[key].is_null() ? std::nan("") : (*metrics)[key].get<double>();
  }
  return nv::kSuccess;
}
#endif

// MIG (both driver variants: MIG predates GPM).
nv::Return nvmlDeviceGetMigMode(nv::Device device, unsigned int* current, unsigned int* pending) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (!gpu.contains("mig")) return nv::kErrorNotSupported;  // a GPU without MIG
    *current = *pending = gpu["mig"].value("mode", 0u);
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetMaxMigDeviceCount(nv::Device device, unsigned int* count) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    *count = gpu.contains("mig") ? kMaxMigDevices : 0;
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetMigDeviceHandleByIndex(nv::Device device, unsigned int index,
                                               nv::Device* mig_device) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (!gpu.contains("mig") || gpu["mig"].value("mode", 0) != 1) return nv::kErrorNotSupported;
    if (index >= static_cast<unsigned int>(kMaxMigDevices)) return nv::kErrorInvalidArgument;
    if (index >= gpu["mig"].value("instances", json::array()).size()) return nv::kErrorNotFound;
    *mig_device = &g_mig_devices[device->index][index];
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetGpuInstanceId(nv::Device device, unsigned int* id) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    const json* instance = InstanceOf(gpu, device);
    if (instance == nullptr) return nv::kErrorNotSupported;  // not a MIG device
    *id = instance->value("gpu_instance", 0u);
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetComputeInstanceId(nv::Device device, unsigned int* id) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    const json* instance = InstanceOf(gpu, device);
    if (instance == nullptr) return nv::kErrorNotSupported;
    *id = instance->value("compute_instance", 0u);
    return nv::kSuccess;
  });
}

nv::Return nvmlDeviceGetGpuInstanceById(nv::Device device, unsigned int id,
                                        nv::GpuInstance* gpu_instance) {
  Timed timed;
  return DeviceCall(__func__, device, [&](const json& gpu) {
    if (!gpu.contains("mig")) return nv::kErrorNotSupported;
    const json& instances = gpu["mig"].value("instances", json::array());
    for (size_t slot = 0; slot < instances.size() && slot < kMaxMigDevices; ++slot) {
      if (instances[slot].value("gpu_instance", 0u) == id) {
        *gpu_instance = &g_gpu_instances[device->index][slot];
        return nv::kSuccess;
      }
    }
    return nv::kErrorNotFound;
  });
}

nv::Return nvmlGpuInstanceGetInfo(nv::GpuInstance gpu_instance, nv::GpuInstanceInfo* info) {
  Timed timed;
  if (gpu_instance == nullptr || info == nullptr) return nv::kErrorInvalidArgument;
  return DeviceCall(__func__, &g_devices[gpu_instance->gpu], [&](const json& gpu) {
    if (!gpu.contains("mig")) return nv::kErrorNotFound;
    const json instances = gpu["mig"].value("instances", json::array());
    if (static_cast<size_t>(gpu_instance->slot) >= instances.size()) return nv::kErrorNotFound;
    const json& instance = instances[gpu_instance->slot];
    const json placement = instance.value("placement", json::array({0, 0}));
    *info = {.device = &g_devices[gpu_instance->gpu],
             .id = instance.value("gpu_instance", 0u),
             .profile_id = 0,
             .placement = {.start = placement[0].get<unsigned int>(),
                           .size = placement[1].get<unsigned int>()}};
    return nv::kSuccess;
  });
}

}  // extern "C"
