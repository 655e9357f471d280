// Resolves NVML's entry points one by one from the loaded driver library.
#include "backend/nvml_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <initializer_list>
#include <string>

namespace vigil::nvml {
namespace {

// Sets *fn to the first of `names` the library exports, or null.
template <typename Fn>
void Resolve(void* library, Fn* fn, std::initializer_list<const char*> names) {
  *fn = nullptr;
  for (const char* name : names) {
    if (void* symbol = dlsym(library, name)) {
      *fn = reinterpret_cast<Fn>(symbol);
      return;
    }
  }
}

}  // namespace

size_t ProcessInfoSize(std::string_view driver_version, bool v3) {
  if (!v3) return sizeof(ProcessInfo);
  // "535.54.03": the branch and the release within it.
  unsigned int branch = 0;
  unsigned int release = 0;
  const std::string version(driver_version);
  if (std::sscanf(version.c_str(), "%u.%u", &branch, &release) != 2) return sizeof(ProcessInfo);
  return branch == 535 && release >= 43 && release < 98 ? kProcessInfoCcSize : sizeof(ProcessInfo);
}

void ResolveApi(void* library, Api* api) {
  Resolve(library, &api->Init, {"nvmlInit_v2", "nvmlInit"});
  Resolve(library, &api->Shutdown, {"nvmlShutdown"});
  Resolve(library, &api->ErrorString, {"nvmlErrorString"});
  Resolve(library, &api->SystemGetDriverVersion, {"nvmlSystemGetDriverVersion"});
  Resolve(library, &api->SystemGetNvmlVersion, {"nvmlSystemGetNVMLVersion"});
  Resolve(library, &api->DeviceGetCount, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  Resolve(library, &api->DeviceGetHandleByIndex,
          {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  Resolve(library, &api->DeviceGetName, {"nvmlDeviceGetName"});
  Resolve(library, &api->DeviceGetBrand, {"nvmlDeviceGetBrand"});
  Resolve(library, &api->DeviceGetSerial, {"nvmlDeviceGetSerial"});
  Resolve(library, &api->DeviceGetUuid, {"nvmlDeviceGetUUID"});
  Resolve(library, &api->DeviceGetMinorNumber, {"nvmlDeviceGetMinorNumber"});
  Resolve(library, &api->DeviceGetPciInfo, {"nvmlDeviceGetPciInfo_v3"});
  Resolve(library, &api->DeviceValidateInforom, {"nvmlDeviceValidateInforom"});
  Resolve(library, &api->DeviceGetVbiosVersion, {"nvmlDeviceGetVbiosVersion"});
  Resolve(library, &api->DeviceGetInforomVersion, {"nvmlDeviceGetInforomVersion"});
  Resolve(library, &api->DeviceGetInforomImageVersion, {"nvmlDeviceGetInforomImageVersion"});
  Resolve(library, &api->DeviceGetClockInfo, {"nvmlDeviceGetClockInfo"});
  Resolve(library, &api->DeviceGetMaxClockInfo, {"nvmlDeviceGetMaxClockInfo"});
  Resolve(library, &api->DeviceGetClocksEventReasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  Resolve(library, &api->DeviceGetTemperature, {"nvmlDeviceGetTemperature"});
  Resolve(library, &api->DeviceGetTemperatureV, {"nvmlDeviceGetTemperatureV"});
  Resolve(library, &api->DeviceGetPowerUsage, {"nvmlDeviceGetPowerUsage"});
  Resolve(library, &api->DeviceGetTotalEnergyConsumption, {"nvmlDeviceGetTotalEnergyConsumption"});
  Resolve(library, &api->DeviceGetPowerManagementLimit, {"nvmlDeviceGetPowerManagementLimit"});
  Resolve(library, &api->DeviceGetEnforcedPowerLimit, {"nvmlDeviceGetEnforcedPowerLimit"});
  Resolve(library, &api->DeviceGetPerformanceState, {"nvmlDeviceGetPerformanceState"});
  Resolve(library, &api->DeviceGetFanSpeed, {"nvmlDeviceGetFanSpeed"});
  Resolve(library, &api->DeviceGetUtilizationRates, {"nvmlDeviceGetUtilizationRates"});
  Resolve(library, &api->DeviceGetEncoderUtilization, {"nvmlDeviceGetEncoderUtilization"});
  Resolve(library, &api->DeviceGetDecoderUtilization, {"nvmlDeviceGetDecoderUtilization"});
  Resolve(library, &api->DeviceGetMaxPcieLinkGeneration, {"nvmlDeviceGetMaxPcieLinkGeneration"});
  Resolve(library, &api->DeviceGetMaxPcieLinkWidth, {"nvmlDeviceGetMaxPcieLinkWidth"});
  Resolve(library, &api->DeviceGetCurrPcieLinkGeneration, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  Resolve(library, &api->DeviceGetCurrPcieLinkWidth, {"nvmlDeviceGetCurrPcieLinkWidth"});
  Resolve(library, &api->DeviceGetMemoryInfo, {"nvmlDeviceGetMemoryInfo"});
  Resolve(library, &api->DeviceGetMemoryInfoV2, {"nvmlDeviceGetMemoryInfo_v2"});
  Resolve(library, &api->DeviceGetEccMode, {"nvmlDeviceGetEccMode"});
  Resolve(library, &api->DeviceGetUnrepairableMemoryFlag,
          {"nvmlDeviceGetUnrepairableMemoryFlag_v1"});
  Resolve(library, &api->DeviceGetGpuFabricInfoV, {"nvmlDeviceGetGpuFabricInfoV"});
  Resolve(library, &api->DeviceGetFieldValues, {"nvmlDeviceGetFieldValues"});
  Resolve(library, &api->DeviceGetComputeRunningProcesses,
          {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  api->compute_running_processes_v3 =
      dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3") != nullptr;
  Resolve(library, &api->DeviceGetProcessUtilization, {"nvmlDeviceGetProcessUtilization"});
  Resolve(library, &api->EventSetCreate, {"nvmlEventSetCreate"});
  Resolve(library, &api->DeviceGetSupportedEventTypes, {"nvmlDeviceGetSupportedEventTypes"});
  Resolve(library, &api->DeviceRegisterEvents, {"nvmlDeviceRegisterEvents"});
  Resolve(library, &api->EventSetWait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  Resolve(library, &api->EventSetFree, {"nvmlEventSetFree"});
  Resolve(library, &api->GpmQueryDeviceSupport, {"nvmlGpmQueryDeviceSupport"});
  Resolve(library, &api->GpmSampleAlloc, {"nvmlGpmSampleAlloc"});
  Resolve(library, &api->GpmSampleFree, {"nvmlGpmSampleFree"});
  Resolve(library, &api->GpmSampleGet, {"nvmlGpmSampleGet"});
  Resolve(library, &api->GpmMetricsGet, {"nvmlGpmMetricsGet"});
  Resolve(library, &api->DeviceGetMigMode, {"nvmlDeviceGetMigMode"});
  Resolve(library, &api->DeviceGetMaxMigDeviceCount, {"nvmlDeviceGetMaxMigDeviceCount"});
  Resolve(library, &api->DeviceGetMigDeviceHandleByIndex, {"nvmlDeviceGetMigDeviceHandleByIndex"});
  Resolve(library, &api->DeviceGetGpuInstanceId, {"nvmlDeviceGetGpuInstanceId"});
  Resolve(library, &api->DeviceGetComputeInstanceId, {"nvmlDeviceGetComputeInstanceId"});
  Resolve(library, &api->DeviceGetGpuInstanceById, {"nvmlDeviceGetGpuInstanceById"});
  Resolve(library, &api->GpuInstanceGetInfo, {"nvmlGpuInstanceGetInfo"});
  Resolve(library, &api->GpmMigSampleGet, {"nvmlGpmMigSampleGet"});
}

}  // namespace vigil::nvml
