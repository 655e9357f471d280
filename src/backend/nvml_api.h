// The part of NVIDIA's NVML C API that Vigil uses, declared here from NVIDIA's published NVML API
// reference (nvml.h) because no NVIDIA header or library is present at build time, plus the table
// of entry points resolved from the driver's libnvidia-ml at run time.
//
// Every entry point is resolved on its own: a symbol an older driver lacks is a null pointer, and
// the fields that need it read as "not supported". The layouts below are NVML's ABI; they must
// match nvml.h exactly (the fake library in tests/fake_nvml uses the same declarations, so a
// mistake here would not show in tests: check against nvml.h when adding anything).
// Thread-safety: the table is immutable once loaded; NVML itself is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vigil::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorCorruptedInforom = 14;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorNoData = 21;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorGpuNotFound = 28;
inline constexpr Return kErrorUnknown = 999;

struct nvmlDevice_st;
using Device = nvmlDevice_st*;  // nvmlDevice_t
struct nvmlEventSet_st;
using EventSet = nvmlEventSet_st*;  // nvmlEventSet_t
struct nvmlGpmSample_st;
struct nvmlGpuInstance_st;
using GpuInstance = nvmlGpuInstance_st*;  // nvmlGpuInstance_t

// Buffer sizes (NVML_*_BUFFER_SIZE).
inline constexpr unsigned int kNameBufferSize = 96;    // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned int kUuidBufferSize = 96;    // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned int kSerialBufferSize = 30;  // NVML_DEVICE_SERIAL_BUFFER_SIZE
inline constexpr unsigned int kVbiosBufferSize = 32;   // NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE
// NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE, and nvmlInforomObject_t's values.
inline constexpr unsigned int kInforomVersionBufferSize = 16;
inline constexpr int kInforomOem = 0;
inline constexpr int kInforomEcc = 1;
inline constexpr int kInforomPower = 2;
inline constexpr unsigned int kSystemVersionBufferSize = 80;  // NVML_SYSTEM_*_VERSION_BUFFER_SIZE

struct PciInfo {  // nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3)
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct Memory {  // nvmlMemory_t, bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t, bytes
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size with the version in the top byte.
inline constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);

struct TemperatureV1 {   // nvmlTemperature_v1_t (nvml.h 12.6+)
  unsigned int version;  // kTemperatureV1Version
  int sensor_type;       // nvmlTemperatureSensors_t: kTemperatureGpu
  int temperature;       // °C
};
// NVML_STRUCT_VERSION(Temperature, 1).
inline constexpr unsigned int kTemperatureV1Version =
    static_cast<unsigned int>(sizeof(TemperatureV1)) | (1u << 24);

struct UnrepairableMemoryStatusV1 {  // nvmlUnrepairableMemoryStatus_v1_t
  unsigned int unrepairable_memory;
};

// nvmlClockType_t, nvmlTemperatureSensors_t, nvmlEnableState_t.
inline constexpr int kClockSm = 1;
inline constexpr int kClockMem = 2;
inline constexpr int kTemperatureGpu = 0;
inline constexpr int kFeatureEnabled = 1;
inline constexpr int kPstateUnknown = 32;

// nvmlValueType_t
inline constexpr int kValueTypeDouble = 0;
inline constexpr int kValueTypeUnsignedInt = 1;
inline constexpr int kValueTypeUnsignedLong = 2;
inline constexpr int kValueTypeUnsignedLongLong = 3;
inline constexpr int kValueTypeSignedLongLong = 4;
inline constexpr int kValueTypeSignedInt = 5;
inline constexpr int kValueTypeUnsignedShort = 6;

union Value {  // nvmlValue_t
  double d_val;
  int si_val;
  unsigned int ui_val;
  unsigned long ul_val;
  unsigned long long ull_val;
  long long sll_val;
  unsigned short us_val;
};

struct FieldValue {  // nvmlFieldValue_t
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;  // µs since the epoch
  long long latency_usec;
  int value_type;  // nvmlValueType_t
  Return nvml_return;
  Value value;
};

// nvmlFieldValue_t.scopeId for an NVLink field: the sum over every link (nvml.h).
inline constexpr unsigned int kScopeAllLinks = 0xFFFFFFFFu;

// NVML_FI_* field IDs of nvmlDeviceGetFieldValues.
inline constexpr unsigned int kFiEccSbeVolTotal = 3;
inline constexpr unsigned int kFiEccDbeVolTotal = 4;
inline constexpr unsigned int kFiEccSbeAggTotal = 5;
inline constexpr unsigned int kFiEccDbeAggTotal = 6;
inline constexpr unsigned int kFiRetiredSbe = 29;
inline constexpr unsigned int kFiRetiredDbe = 30;
inline constexpr unsigned int kFiRetiredPending = 31;
inline constexpr unsigned int kFiNvlinkCrcFlitErrorTotal = 38;
inline constexpr unsigned int kFiNvlinkCrcDataErrorTotal = 45;
inline constexpr unsigned int kFiNvlinkReplayErrorTotal = 52;
inline constexpr unsigned int kFiNvlinkRecoveryErrorTotal = 59;
inline constexpr unsigned int kFiPerfPolicyPower = 74;  // violation time, ns
inline constexpr unsigned int kFiPerfPolicyThermal = 75;
inline constexpr unsigned int kFiPerfPolicySyncBoost = 76;
inline constexpr unsigned int kFiPerfPolicyBoardLimit = 77;
inline constexpr unsigned int kFiPerfPolicyLowUtilization = 78;
inline constexpr unsigned int kFiPerfPolicyReliability = 79;
inline constexpr unsigned int kFiMemoryTemp = 82;
inline constexpr unsigned int kFiTotalEnergyConsumption = 83;  // mJ
inline constexpr unsigned int kFiPcieReplayCounter = 94;
inline constexpr unsigned int kFiNvlinkThroughputDataTx = 138;  // KiB, payload only
inline constexpr unsigned int kFiNvlinkThroughputDataRx = 139;  // KiB
inline constexpr unsigned int kFiNvlinkThroughputRawTx = 140;   // KiB
inline constexpr unsigned int kFiNvlinkThroughputRawRx = 141;   // KiB
inline constexpr unsigned int kFiRemappedCorrectable = 142;
inline constexpr unsigned int kFiRemappedUncorrectable = 143;
inline constexpr unsigned int kFiRemappedPending = 144;
inline constexpr unsigned int kFiRemappedFailure = 145;
inline constexpr unsigned int kFiGpuRecoveryAction = 230;

struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID for kEventTypeXidCriticalError
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
// nvmlEventMigConfigChange: a GPU's MIG instances were created or destroyed (R450 and newer,
// Ampere and newer; DCGM registers it apart and ignores NOT_SUPPORTED from older drivers).
inline constexpr unsigned long long kEventMigConfigChange = 0x100;

// GPM (GPU performance monitoring, Hopper and newer).
struct GpmSample {  // nvmlGpmSample_t
  nvmlGpmSample_st* handle;
};
struct GpmMetricInfo {
  char* short_name;
  char* long_name;
  char* unit;
};
struct GpmMetric {  // nvmlGpmMetric_t
  unsigned int metric_id;
  Return nvml_return;
  double value;
  GpmMetricInfo metric_info;
};
// NVML_GPM_METRIC_MAX of the nvml.h this was checked against. The library reads only numMetrics
// entries, so the array being longer than an older driver's maximum is harmless.
inline constexpr unsigned int kGpmMetricMax = 333;
struct GpmMetricsGet {   // nvmlGpmMetricsGet_t
  unsigned int version;  // kGpmMetricsGetVersion
  unsigned int num_metrics;
  GpmSample sample1;
  GpmSample sample2;
  GpmMetric metrics[kGpmMetricMax];
};
inline constexpr unsigned int kGpmMetricsGetVersion = 1;
struct GpmSupport {      // nvmlGpmSupport_t
  unsigned int version;  // kGpmSupportVersion
  unsigned int is_supported_device;
};
inline constexpr unsigned int kGpmSupportVersion = 1;

// nvmlGpmMetricId_t values used.
inline constexpr unsigned int kGpmGraphicsUtil = 1;          // percent
inline constexpr unsigned int kGpmSmUtil = 2;                // percent
inline constexpr unsigned int kGpmSmOccupancy = 3;           // percent
inline constexpr unsigned int kGpmAnyTensorUtil = 5;         // percent
inline constexpr unsigned int kGpmDramBwUtil = 10;           // percent
inline constexpr unsigned int kGpmFp64Util = 11;             // percent
inline constexpr unsigned int kGpmFp32Util = 12;             // percent
inline constexpr unsigned int kGpmFp16Util = 13;             // percent
inline constexpr unsigned int kGpmPcieTxPerSec = 20;         // MiB/s
inline constexpr unsigned int kGpmPcieRxPerSec = 21;         // MiB/s
inline constexpr unsigned int kGpmNvlinkTotalRxPerSec = 60;  // MiB/s
inline constexpr unsigned int kGpmNvlinkTotalTxPerSec = 61;  // MiB/s

// MIG.
inline constexpr unsigned int kDeviceMigEnable = 1;  // NVML_DEVICE_MIG_ENABLE
struct GpuInstancePlacement {                        // nvmlGpuInstancePlacement_t, in memory slices
  unsigned int start;
  unsigned int size;
};
struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Device device;          // the parent GPU
  unsigned int id;
  unsigned int profile_id;
  GpuInstancePlacement placement;
};

// GPU fabric (NVSwitch systems): nvmlGpuFabricInfo_v2_t and _v3_t (nvml.h 12.x and 13.x; v3 adds
// the health summary). The version names the layout the driver fills.
struct GpuFabricInfoV3 {
  unsigned int version;
  unsigned char cluster_uuid[16];  // NVML_GPU_FABRIC_UUID_LEN
  Return status;                   // the training's error, meaningful once state is COMPLETED
  unsigned int clique_id;
  unsigned char state;           // nvmlGpuFabricState_t: kGpuFabricState*
  unsigned int health_mask;      // NVML_GPU_FABRIC_HEALTH_MASK_*
  unsigned char health_summary;  // NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3 only)
};
struct GpuFabricInfoV2 {
  unsigned int version;
  unsigned char cluster_uuid[16];
  Return status;
  unsigned int clique_id;
  unsigned char state;
  unsigned int health_mask;
};
inline constexpr unsigned int kGpuFabricInfoV2Version =
    static_cast<unsigned int>(sizeof(GpuFabricInfoV2)) | (2u << 24);
inline constexpr unsigned int kGpuFabricInfoV3Version =
    static_cast<unsigned int>(sizeof(GpuFabricInfoV3)) | (3u << 24);
inline constexpr unsigned char kGpuFabricStateNotSupported = 0;
inline constexpr unsigned char kGpuFabricStateNotStarted = 1;
inline constexpr unsigned char kGpuFabricStateInProgress = 2;
inline constexpr unsigned char kGpuFabricStateCompleted = 3;

struct ProcessInfo {  // nvmlProcessInfo_t (_v2 and _v3 of the running-processes queries)
  unsigned int pid;
  unsigned long long used_gpu_memory;  // bytes
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
static_assert(sizeof(ProcessInfo) == 24);
// nvmlProcessUtilizationSample_t: one process's utilisation over one of the driver's sample
// periods, stamped with the CPU time in microseconds.
struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long time_stamp;
  unsigned int sm_util;  // percent
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};
static_assert(sizeof(ProcessUtilizationSample) == 32);
// usedGpuMemory when the driver does not say (NVML_VALUE_NOT_AVAILABLE).
inline constexpr unsigned long long kValueNotAvailable = ~0ull;
// What drivers 535.43.02 up to 535.86.x write instead from _v3: nvmlProcessInfo_v3_t, with
// usedGpuCcProtectedMemory after the fields above, 32 bytes an entry, with no version to say so
// (nvidia-settings' nvml.h of 535.43.02; 535.98 removed the _v3 query, 535.104.05 brought it
// back with the 24-byte entry; nvitop pull requests #79, #89, #94). Read past that, an entry
// of 24 bytes takes the next entry's pid from the protected-memory count.
inline constexpr size_t kProcessInfoCcSize = 32;
// The size of one entry of DeviceGetComputeRunningProcesses for the driver `driver_version`
// ("535.54.03") when `v3` (the _v3 query resolved): kProcessInfoCcSize for 535.43 up to (not
// including) 535.98, else sizeof(ProcessInfo).
size_t ProcessInfoSize(std::string_view driver_version, bool v3);

// The entry points, each null when the library lacks it. Signatures follow nvml.h.
struct Api {
  Return (*Init)() = nullptr;  // nvmlInit_v2, else nvmlInit
  Return (*Shutdown)() = nullptr;
  const char* (*ErrorString)(Return) = nullptr;
  Return (*SystemGetDriverVersion)(char*, unsigned int) = nullptr;
  Return (*SystemGetNvmlVersion)(char*, unsigned int) = nullptr;
  Return (*DeviceGetCount)(unsigned int*) = nullptr;                  // _v2, else the original
  Return (*DeviceGetHandleByIndex)(unsigned int, Device*) = nullptr;  // _v2, else the original
  Return (*DeviceGetName)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetBrand)(Device, int*) = nullptr;
  Return (*DeviceGetSerial)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetUuid)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetMinorNumber)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetPciInfo)(Device, PciInfo*) = nullptr;  // _v3
  Return (*DeviceValidateInforom)(Device) = nullptr;
  Return (*DeviceGetVbiosVersion)(Device, char*, unsigned int) = nullptr;
  // nvmlDeviceGetInforomVersion(device, nvmlInforomObject_t, version, length), and the image's.
  Return (*DeviceGetInforomVersion)(Device, int, char*, unsigned int) = nullptr;
  Return (*DeviceGetInforomImageVersion)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetClockInfo)(Device, int, unsigned int*) = nullptr;
  Return (*DeviceGetMaxClockInfo)(Device, int, unsigned int*) = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons (R535+), else ...ThrottleReasons.
  Return (*DeviceGetClocksEventReasons)(Device, unsigned long long*) = nullptr;
  Return (*DeviceGetTemperature)(Device, int, unsigned int*) = nullptr;  // deprecated in NVML 13
  Return (*DeviceGetTemperatureV)(Device, TemperatureV1*) = nullptr;     // its successor
  Return (*DeviceGetPowerUsage)(Device, unsigned int*) = nullptr;        // mW
  Return (*DeviceGetTotalEnergyConsumption)(Device, unsigned long long*) = nullptr;  // mJ
  Return (*DeviceGetPowerManagementLimit)(Device, unsigned int*) = nullptr;          // mW
  Return (*DeviceGetEnforcedPowerLimit)(Device, unsigned int*) = nullptr;            // mW
  Return (*DeviceGetPerformanceState)(Device, int*) = nullptr;
  Return (*DeviceGetFanSpeed)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetUtilizationRates)(Device, Utilization*) = nullptr;
  Return (*DeviceGetEncoderUtilization)(Device, unsigned int*, unsigned int*) = nullptr;
  Return (*DeviceGetDecoderUtilization)(Device, unsigned int*, unsigned int*) = nullptr;
  Return (*DeviceGetMaxPcieLinkGeneration)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetMaxPcieLinkWidth)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetCurrPcieLinkGeneration)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetCurrPcieLinkWidth)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetMemoryInfo)(Device, Memory*) = nullptr;
  Return (*DeviceGetMemoryInfoV2)(Device, MemoryV2*) = nullptr;
  Return (*DeviceGetEccMode)(Device, int*, int*) = nullptr;
  Return (*DeviceGetUnrepairableMemoryFlag)(Device, UnrepairableMemoryStatusV1*) = nullptr;
  Return (*DeviceGetFieldValues)(Device, int, FieldValue*) = nullptr;
  // nvmlDeviceGetComputeRunningProcesses_v3, else _v2: ProcessInfo entries, but see
  // ProcessInfoSize() for the drivers that write bigger ones.
  Return (*DeviceGetComputeRunningProcesses)(Device, unsigned int*, ProcessInfo*) = nullptr;
  bool compute_running_processes_v3 = false;  // the query above is _v3
  // nvmlDeviceGetProcessUtilization: the samples since lastSeenTimeStamp (0: all the driver
  // holds); NOT_FOUND when there are none, INSUFFICIENT_SIZE with the count needed.
  Return (*DeviceGetProcessUtilization)(Device, ProcessUtilizationSample*, unsigned int*,
                                        unsigned long long) = nullptr;
  Return (*EventSetCreate)(EventSet*) = nullptr;
  Return (*DeviceGetSupportedEventTypes)(Device, unsigned long long*) = nullptr;
  Return (*DeviceRegisterEvents)(Device, unsigned long long, EventSet) = nullptr;
  Return (*EventSetWait)(EventSet, EventData*, unsigned int) = nullptr;  // _v2, else original
  Return (*EventSetFree)(EventSet) = nullptr;
  Return (*GpmQueryDeviceSupport)(Device, GpmSupport*) = nullptr;
  Return (*GpmSampleAlloc)(GpmSample*) = nullptr;
  Return (*GpmSampleFree)(GpmSample) = nullptr;
  Return (*GpmSampleGet)(Device, GpmSample) = nullptr;
  Return (*GpmMetricsGet)(GpmMetricsGet*) = nullptr;
  // MIG: the mode (current, pending), the MIG device handles and their ids, the GPU instance's
  // placement; GPM samples of one GPU instance (Hopper and newer).
  Return (*DeviceGetMigMode)(Device, unsigned int*, unsigned int*) = nullptr;
  Return (*DeviceGetMaxMigDeviceCount)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetMigDeviceHandleByIndex)(Device, unsigned int, Device*) = nullptr;
  Return (*DeviceGetGpuInstanceId)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetComputeInstanceId)(Device, unsigned int*) = nullptr;
  Return (*DeviceGetGpuInstanceById)(Device, unsigned int, GpuInstance*) = nullptr;
  Return (*GpuInstanceGetInfo)(GpuInstance, GpuInstanceInfo*) = nullptr;
  Return (*GpmMigSampleGet)(Device, unsigned int, GpmSample) = nullptr;
  // nvmlDeviceGetGpuFabricInfoV(device, nvmlGpuFabricInfoV_t*): v3 or v2 by the version field.
  Return (*DeviceGetGpuFabricInfoV)(Device, GpuFabricInfoV3*) = nullptr;
};

// Resolves every entry point of `api` from the dlopen handle `library`.
void ResolveApi(void* library, Api* api);

}  // namespace vigil::nvml
