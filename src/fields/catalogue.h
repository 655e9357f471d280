// The field catalogue: every field Vigil knows, keyed by DCGM's numeric field ID, with its names,
// type, unit, help text and default sampling interval. One table, used by the engine (what to
// sample and how often), the CLI (parsing -e lists, column headers) and the exporter.
// Immutable after static initialisation; every function here is thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fields/value.h"

namespace vigil {

struct FieldInfo {
  FieldId id;
  // The name dashboards, counters files and dcgm-exporter's series use (DCGM before 4.6).
  std::string_view name;
  // DCGM 4.6 renamed many fields; the new name, or "" when 4.6 kept the old one.
  std::string_view name_v46;
  // A still older name kept as an alias (e.g. DCGM_FI_DEV_CLOCK_THROTTLE_REASONS), or "".
  std::string_view legacy_name;
  FieldType type;
  std::string_view unit;        // "C", "W", "MHz", "%", "ns", "" ...
  std::string_view short_name;  // column header in `vigil dmon`
  std::string_view help;
  absl::Duration default_interval;
  // A counter that only grows (ECC, replays, energy, violation time). Injection into it must
  // keep it monotonic, and exporters type it as a counter.
  bool cumulative;
  // Filled by the engine from backend events (the last XID), not read from the backend.
  bool from_events;
};

// Well-known field IDs used in code. The catalogue has more.
namespace fid {
inline constexpr FieldId kDriverVersion = 1;
inline constexpr FieldId kNvmlVersion = 2;
inline constexpr FieldId kName = 50;
inline constexpr FieldId kBrand = 51;
inline constexpr FieldId kSerial = 53;
inline constexpr FieldId kUuid = 54;
inline constexpr FieldId kMinorNumber = 55;
inline constexpr FieldId kOemInforomVersion = 56;
inline constexpr FieldId kPciBusId = 57;
inline constexpr FieldId kEccInforomVersion = 80;
inline constexpr FieldId kPowerInforomVersion = 81;
inline constexpr FieldId kInforomImageVersion = 82;
inline constexpr FieldId kInforomConfigValid = 84;
inline constexpr FieldId kVbiosVersion = 85;
inline constexpr FieldId kSmClock = 100;
inline constexpr FieldId kMemClock = 101;
inline constexpr FieldId kClocksEventReasons = 112;
inline constexpr FieldId kMaxSmClock = 113;
inline constexpr FieldId kMaxMemClock = 114;
inline constexpr FieldId kMemoryTemp = 140;
inline constexpr FieldId kGpuTemp = 150;
inline constexpr FieldId kPowerUsage = 155;
inline constexpr FieldId kTotalEnergy = 156;
inline constexpr FieldId kPowerMgmtLimit = 160;
inline constexpr FieldId kEnforcedPowerLimit = 164;
inline constexpr FieldId kPstate = 190;
inline constexpr FieldId kFanSpeed = 191;
inline constexpr FieldId kPcieReplayCounter = 202;
inline constexpr FieldId kGpuUtil = 203;
inline constexpr FieldId kMemCopyUtil = 204;
inline constexpr FieldId kEncUtil = 206;
inline constexpr FieldId kDecUtil = 207;
inline constexpr FieldId kXidErrors = 230;
inline constexpr FieldId kPcieMaxLinkGen = 235;
inline constexpr FieldId kPcieMaxLinkWidth = 236;
inline constexpr FieldId kPcieLinkGen = 237;
inline constexpr FieldId kPcieLinkWidth = 238;
inline constexpr FieldId kPowerViolation = 240;
inline constexpr FieldId kThermalViolation = 241;
inline constexpr FieldId kSyncBoostViolation = 242;
inline constexpr FieldId kBoardLimitViolation = 243;
inline constexpr FieldId kLowUtilViolation = 244;
inline constexpr FieldId kReliabilityViolation = 245;
inline constexpr FieldId kFbTotal = 250;
inline constexpr FieldId kFbFree = 251;
inline constexpr FieldId kFbUsed = 252;
inline constexpr FieldId kFbReserved = 253;
inline constexpr FieldId kEccCurrent = 300;
inline constexpr FieldId kEccSbeVolTotal = 310;
inline constexpr FieldId kEccDbeVolTotal = 311;
inline constexpr FieldId kEccSbeAggTotal = 312;
inline constexpr FieldId kEccDbeAggTotal = 313;
inline constexpr FieldId kRetiredSbe = 390;
inline constexpr FieldId kRetiredDbe = 391;
inline constexpr FieldId kRetiredPending = 392;
inline constexpr FieldId kUncorrectableRemappedRows = 393;
inline constexpr FieldId kCorrectableRemappedRows = 394;
inline constexpr FieldId kRowRemapFailure = 395;
inline constexpr FieldId kRowRemapPending = 396;
inline constexpr FieldId kNvlinkCrcFlitErrors = 409;
inline constexpr FieldId kNvlinkCrcDataErrors = 419;
inline constexpr FieldId kNvlinkReplayErrors = 429;
inline constexpr FieldId kNvlinkRecoveryErrors = 439;
inline constexpr FieldId kNvlinkBandwidthL0 = 440;  // ... L5 = 445: one field per link
inline constexpr FieldId kNvlinkBandwidthL5 = 445;
inline constexpr FieldId kNvlinkBandwidthTotal = 449;
inline constexpr FieldId kVgpuLicenseStatus = 526;
inline constexpr FieldId kProfGrEngineActive = 1001;
inline constexpr FieldId kProfSmActive = 1002;
inline constexpr FieldId kProfSmOccupancy = 1003;
inline constexpr FieldId kProfPipeTensorActive = 1004;
inline constexpr FieldId kProfDramActive = 1005;
inline constexpr FieldId kProfPipeFp64Active = 1006;
inline constexpr FieldId kProfPipeFp32Active = 1007;
inline constexpr FieldId kProfPipeFp16Active = 1008;
inline constexpr FieldId kProfPcieTxBytes = 1009;
inline constexpr FieldId kProfPcieRxBytes = 1010;
inline constexpr FieldId kProfNvlinkTxBytes = 1011;
inline constexpr FieldId kProfNvlinkRxBytes = 1012;
inline constexpr FieldId kFabricManagerStatus = 170;  // dcgmFabricManagerStatus_t
inline constexpr FieldId kFabricManagerError = 171;
inline constexpr FieldId kFabricHealthMask = 174;
inline constexpr FieldId kFabricHealthSummary = 175;
inline constexpr FieldId kMemoryUnrepairable = 1507;
inline constexpr FieldId kGpuRecoveryAction = 1523;
}  // namespace fid

// DCGM's clock event reason bits (field 112), DCGM_CLOCKS_EVENT_REASON_*.
namespace clock_event {
inline constexpr int64_t kGpuIdle = 0x1;
inline constexpr int64_t kClocksSetting = 0x2;
inline constexpr int64_t kSwPowerCap = 0x4;
inline constexpr int64_t kHwSlowdown = 0x8;
inline constexpr int64_t kSyncBoost = 0x10;
inline constexpr int64_t kSwThermal = 0x20;
inline constexpr int64_t kHwThermal = 0x40;
inline constexpr int64_t kHwPowerBrake = 0x80;
inline constexpr int64_t kDisplayClocks = 0x100;
}  // namespace clock_event

// Every field in the catalogue, ordered by ID.
std::span<const FieldInfo> AllFields();

// The field with this ID, or nullptr.
const FieldInfo* FindField(FieldId id);

// Whether the driver gives the field per MIG GPU instance, so that on a GPU in MIG mode each
// instance has a value of its own: the framebuffer's (an instance owns its memory slices) and
// the activity ratios of the profiling fields (GPM's per-instance sampling on Hopper and later).
// Every other field — temperature, power, clocks, ECC, PCIe and NVLink traffic — belongs to the
// physical GPU and is sampled once per GPU.
bool SampledPerMigInstance(FieldId id);

// The shortest interval the field may be sampled at (zero: any). Validating the infoROM (84)
// makes the driver checksum every infoROM object: DCGM never does it more often than every
// 30 s, and neither does Vigil.
absl::Duration MinInterval(FieldId id);

// Resolves a field reference as users write it: a numeric ID ("150"), or any of the field's
// names, case-insensitively ("DCGM_FI_DEV_GPU_TEMP", "dcgm_fi_dev_gpu_temp_celsius").
// InvalidArgument with a message naming the reference when nothing matches.
absl::StatusOr<const FieldInfo*> ResolveField(std::string_view reference);

// Resolves a comma-separated list ("DCGM_FI_DEV_GPU_TEMP,155"). Duplicates are kept once, in
// first-seen order. Empty items and an empty list are errors.
absl::StatusOr<std::vector<FieldId>> ResolveFieldList(std::string_view list);

}  // namespace vigil
