// The catalogue table and its lookups. Facts (IDs, names, types, units) follow DCGM's
// dcgm_fields.h (4.0-4.6); help texts follow dcgm-exporter's counters file where it has the field.
#include "fields/catalogue.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "common/check.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil {
namespace {

using absl::Seconds;
constexpr FieldType kI = FieldType::kInt64;
constexpr FieldType kD = FieldType::kDouble;
constexpr FieldType kS = FieldType::kString;

// Sampling intervals. Fast-moving telemetry every second; slow counters (ECC, row remap) every
// 30 s as DCGM's health watches do; identity and limits once a minute, as they only change on
// a driver reload or an operator's action.
constexpr absl::Duration kFast = Seconds(1);
constexpr absl::Duration kErrors = Seconds(10);
constexpr absl::Duration kSlow = Seconds(30);
constexpr absl::Duration kStatic = Seconds(60);

// clang-format off
const FieldInfo kFields[] = {
  // id, name, 4.6 name, legacy name, type, unit, short, help, interval, cumulative, from_events
  {1, "DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION", "", kS, "", "DRVER", "Driver Version", kStatic, false, false},
  {2, "DCGM_FI_NVML_VERSION", "DCGM_FI_SYSTEM_NVML_VERSION", "", kS, "", "NVMLV", "NVML Version", kStatic, false, false},
  {50, "DCGM_FI_DEV_NAME", "DCGM_FI_DEV_GPU_NAME", "", kS, "", "DVNAM", "Name of the GPU device", kStatic, false, false},
  {51, "DCGM_FI_DEV_BRAND", "DCGM_FI_DEV_GPU_BRAND", "", kS, "", "DVBRN", "Device Brand", kStatic, false, false},
  {53, "DCGM_FI_DEV_SERIAL", "DCGM_FI_DEV_BOARD_SERIAL", "", kS, "", "SRNUM", "Device Serial Number", kStatic, false, false},
  {54, "DCGM_FI_DEV_UUID", "DCGM_FI_DEV_GPU_UUID", "", kS, "", "UUID", "UUID corresponding to the device", kStatic, false, false},
  {55, "DCGM_FI_DEV_MINOR_NUMBER", "DCGM_FI_DEV_GPU_MINOR_NUMBER", "", kI, "", "MINOR", "Device node minor number /dev/nvidia#", kStatic, false, false},
  {56, "DCGM_FI_DEV_OEM_INFOROM_VER", "DCGM_FI_DEV_INFOROM_OEM_VERSION", "", kS, "", "IROEM", "OEM inforom version", kStatic, false, false},
  {57, "DCGM_FI_DEV_PCI_BUSID", "DCGM_FI_DEV_PCI_BUS_ID", "", kS, "", "PCBID", "PCI bus id of the device", kStatic, false, false},
  {80, "DCGM_FI_DEV_ECC_INFOROM_VER", "DCGM_FI_DEV_INFOROM_ECC_VERSION", "", kS, "", "IRECC", "ECC inforom version", kStatic, false, false},
  {81, "DCGM_FI_DEV_POWER_INFOROM_VER", "DCGM_FI_DEV_INFOROM_POWER_VERSION", "", kS, "", "IRPWR", "Power management object inforom version", kStatic, false, false},
  {82, "DCGM_FI_DEV_INFOROM_IMAGE_VER", "DCGM_FI_DEV_INFOROM_IMAGE_VERSION", "", kS, "", "IRIMG", "Inforom image version", kStatic, false, false},
  {84, "DCGM_FI_DEV_INFOROM_CONFIG_VALID", "DCGM_FI_DEV_INFOROM_VALID", "", kI, "", "IFVLD", "Whether the infoROM checksums are valid (1) or not (0)", kSlow, false, false},
  {85, "DCGM_FI_DEV_VBIOS_VERSION", "", "", kS, "", "VBIOS", "VBIOS version of the device", kStatic, false, false},
  {100, "DCGM_FI_DEV_SM_CLOCK", "", "", kI, "MHz", "SMCLK", "SM clock frequency (in MHz).", kFast, false, false},
  {101, "DCGM_FI_DEV_MEM_CLOCK", "", "", kI, "MHz", "MMCLK", "Memory clock frequency (in MHz).", kFast, false, false},
  {112, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", kI, "bitmask", "CLKEV", "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)", kFast, false, false},
  {113, "DCGM_FI_DEV_MAX_SM_CLOCK", "", "", kI, "MHz", "MXSMC", "Maximum supported SM clock (in MHz).", kStatic, false, false},
  {114, "DCGM_FI_DEV_MAX_MEM_CLOCK", "", "", kI, "MHz", "MXMMC", "Maximum supported memory clock (in MHz).", kStatic, false, false},
  {140, "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "", kI, "C", "MMTMP", "Memory temperature (in C).", kFast, false, false},
  {150, "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "", kI, "C", "TMPTR", "GPU temperature (in C).", kFast, false, false},
  {155, "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", "", kD, "W", "POWER", "Power draw (in W).", kFast, false, false},
  {156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "", "", kI, "mJ", "TOTEC", "Total energy consumption since boot (in mJ).", kFast, true, false},
  {160, "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", "", kD, "W", "PMLMT", "Current power limit (in W).", kStatic, false, false},
  {164, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", "", kD, "W", "EPLMT", "Effective power limit the driver enforces (in W).", kStatic, false, false},
  // The fabric (NVSwitch systems; DCGM 4.5 names, 4.6's where it renamed; 175 is DCGM 4.6's).
  {170, "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", "", "", kI, "", "FMSTA", "The status of the fabric manager: 0 not supported, 1 not started, 2 in progress, 3 success, 4 failure, 5 unrecognized, 6 NVML too old.", kErrors, false, false},
  {171, "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE", "DCGM_FI_DEV_FABRIC_MANAGER_ERROR", "", kI, "", "FMERR", "The fabric manager's error (the NVML error of a failed training; 0 none).", kErrors, false, false},
  {174, "DCGM_FI_DEV_FABRIC_HEALTH_MASK", "", "", kI, "", "FMHLM", "GPU fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_*: degraded bandwidth, route recovery, route unhealthy, access timeout recovery, incorrect configuration).", kErrors, false, false},
  {175, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", "", "", kI, "", "FMHLS", "GPU fabric health summary: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity.", kErrors, false, false},
  {190, "DCGM_FI_DEV_PSTATE", "DCGM_FI_DEV_GPU_PSTATE", "", kI, "", "PSTAT", "Performance state (P-State) 0-15. 0=highest", kFast, false, false},
  {191, "DCGM_FI_DEV_FAN_SPEED", "", "", kI, "%", "FANSP", "Fan speed (in %).", kFast, false, false},
  {202, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "", kI, "", "RPCTR", "Total number of PCIe retries.", kErrors, true, false},
  {203, "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "", kI, "%", "GPUTL", "GPU utilization (in %).", kFast, false, false},
  {204, "DCGM_FI_DEV_MEM_COPY_UTIL", "", "", kI, "%", "MCUTL", "Memory utilization (in %).", kFast, false, false},
  {206, "DCGM_FI_DEV_ENC_UTIL", "", "", kI, "%", "ENCUT", "Encoder utilization (in %).", kFast, false, false},
  {207, "DCGM_FI_DEV_DEC_UTIL", "", "", kI, "%", "DECUT", "Decoder utilization (in %).", kFast, false, false},
  {230, "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "", kI, "", "XIDER", "Value of the last XID error encountered.", kFast, false, true},
  {235, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "", "", kI, "", "PCIMG", "PCIe Max Link Generation", kStatic, false, false},
  {236, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "", "", kI, "lanes", "PCIMW", "PCIe Max Link Width", kStatic, false, false},
  {237, "DCGM_FI_DEV_PCIE_LINK_GEN", "", "", kI, "", "PCILG", "PCIe Current Link Generation", kErrors, false, false},
  {238, "DCGM_FI_DEV_PCIE_LINK_WIDTH", "", "", kI, "lanes", "PCILW", "PCIe Current Link Width", kErrors, false, false},
  {240, "DCGM_FI_DEV_POWER_VIOLATION", "", "", kI, "ns", "PVIOL", "Throttling duration due to power constraints (in ns).", kFast, true, false},
  {241, "DCGM_FI_DEV_THERMAL_VIOLATION", "", "", kI, "ns", "TVIOL", "Throttling duration due to thermal constraints (in ns).", kFast, true, false},
  {242, "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "", "", kI, "ns", "SVIOL", "Throttling duration due to sync-boost constraints (in ns).", kFast, true, false},
  {243, "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "", "", kI, "ns", "BVIOL", "Throttling duration due to board limit constraints (in ns).", kFast, true, false},
  {244, "DCGM_FI_DEV_LOW_UTIL_VIOLATION", "", "", kI, "ns", "LVIOL", "Throttling duration due to low utilization (in ns).", kFast, true, false},
  {245, "DCGM_FI_DEV_RELIABILITY_VIOLATION", "", "", kI, "ns", "RVIOL", "Throttling duration due to reliability constraints (in ns).", kFast, true, false},
  {250, "DCGM_FI_DEV_FB_TOTAL", "", "", kI, "MiB", "FBTTL", "Framebuffer memory total (in MiB).", kStatic, false, false},
  {251, "DCGM_FI_DEV_FB_FREE", "", "", kI, "MiB", "FBFRE", "Framebuffer memory free (in MiB).", kFast, false, false},
  {252, "DCGM_FI_DEV_FB_USED", "", "", kI, "MiB", "FBUSD", "Framebuffer memory used (in MiB).", kFast, false, false},
  {253, "DCGM_FI_DEV_FB_RESERVED", "", "", kI, "MiB", "FBRSV", "Framebuffer memory reserved (in MiB).", kStatic, false, false},
  {300, "DCGM_FI_DEV_ECC_CURRENT", "DCGM_FI_DEV_ECC_MODE", "", kI, "", "ECCUR", "Current ECC mode for the device (1 enabled)", kSlow, false, false},
  {310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "", "", kI, "", "ESVTL", "Total number of single-bit volatile ECC errors.", kSlow, true, false},
  {311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "", "", kI, "", "EDVTL", "Total number of double-bit volatile ECC errors.", kSlow, true, false},
  {312, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "", "", kI, "", "ESATL", "Total number of single-bit persistent ECC errors.", kSlow, true, false},
  {313, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "", "", kI, "", "EDATL", "Total number of double-bit persistent ECC errors.", kSlow, true, false},
  {390, "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", "", kI, "", "RTSBE", "Total number of retired pages due to single-bit errors.", kSlow, true, false},
  {391, "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", "", kI, "", "RTDBE", "Total number of retired pages due to double-bit errors.", kSlow, true, false},
  {392, "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_PAGE_RETIRED_PENDING", "", kI, "", "RTPND", "Whether any pages are pending retirement (1=yes, 0=no).", kSlow, false, false},
  {393, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "", kI, "", "URMPS", "Number of remapped rows for uncorrectable errors", kSlow, true, false},
  {394, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "", kI, "", "CRMPS", "Number of remapped rows for correctable errors", kSlow, true, false},
  {395, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED", "", kI, "", "RRF", "Whether remapping of rows has failed", kSlow, false, false},
  {396, "DCGM_FI_DEV_ROW_REMAP_PENDING", "", "", kI, "", "RRP", "Whether remapping of rows is pending", kSlow, false, false},
  {409, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", "", kI, "", "NVLFL", "Total number of NVLink flow-control CRC errors.", kErrors, true, false},
  {419, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", "", kI, "", "NVLDT", "Total number of NVLink data CRC errors.", kErrors, true, false},
  {429, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", "", kI, "", "NVLRP", "Total number of NVLink retries.", kErrors, true, false},
  {439, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", "", kI, "", "NVLRC", "Total number of NVLink recovery errors.", kErrors, true, false},
  {440, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L0", "", kI, "MB/s", "NVBW0", "NVLink data throughput of link 0, received and transmitted (KiB/s / 1000).", kFast, false, false},
  {441, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L1", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L1", "", kI, "MB/s", "NVBW1", "NVLink data throughput of link 1, received and transmitted (KiB/s / 1000).", kFast, false, false},
  {442, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L2", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L2", "", kI, "MB/s", "NVBW2", "NVLink data throughput of link 2, received and transmitted (KiB/s / 1000).", kFast, false, false},
  {443, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L3", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L3", "", kI, "MB/s", "NVBW3", "NVLink data throughput of link 3, received and transmitted (KiB/s / 1000).", kFast, false, false},
  {444, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L4", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L4", "", kI, "MB/s", "NVBW4", "NVLink data throughput of link 4, received and transmitted (KiB/s / 1000).", kFast, false, false},
  {445, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L5", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L5", "", kI, "MB/s", "NVBW5", "NVLink data throughput of link 5, received and transmitted (KiB/s / 1000).", kFast, false, false},
  {449, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", "", kI, "MB/s", "NVLTP", "NVLink data throughput of all links, received and transmitted (KiB/s / 1000, as DCGM computes it from two samples).", kFast, false, false},
  {526, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "", "", kI, "", "VGPUL", "vGPU License status", kSlow, false, false},
  {1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "", kD, "ratio", "GRACT", "Ratio of time the graphics engine is active.", kFast, false, false},
  {1002, "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO", "", kD, "ratio", "SMACT", "The ratio of cycles an SM has at least 1 warp assigned.", kFast, false, false},
  {1003, "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "", kD, "ratio", "SMOCC", "The ratio of number of warps resident on an SM.", kFast, false, false},
  {1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "", kD, "ratio", "TENSO", "Ratio of cycles the tensor (HMMA) pipe is active.", kFast, false, false},
  {1005, "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO", "", kD, "ratio", "DRAMA", "Ratio of cycles the device memory interface is active sending or receiving data.", kFast, false, false},
  {1006, "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_FP64_UTIL_RATIO", "", kD, "ratio", "FP64A", "Ratio of cycles the fp64 pipes are active.", kFast, false, false},
  {1007, "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_FP32_UTIL_RATIO", "", kD, "ratio", "FP32A", "Ratio of cycles the fp32 pipes are active.", kFast, false, false},
  {1008, "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO", "", kD, "ratio", "FP16A", "Ratio of cycles the fp16 pipes are active.", kFast, false, false},
  {1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "", "", kI, "B/s", "PCITX", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", kFast, false, false},
  {1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "", "", kI, "B/s", "PCIRX", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", kFast, false, false},
  {1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", "", "", kI, "B/s", "NVLTX", "The rate of data transmitted over NVLink - including both protocol headers and data payloads - in bytes per second.", kFast, false, false},
  {1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", "", "", kI, "B/s", "NVLRX", "The rate of data received over NVLink - including both protocol headers and data payloads - in bytes per second.", kFast, false, false},
  {1507, "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG", "DCGM_FI_DEV_MEMORY_UNREPAIRABLE", "", kI, "", "MUNRP", "Whether memory has unrepairable errors (1=yes, 0=no).", kSlow, false, false},
  {1523, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_GPU_RECOVERY_ACTION", "", kI, "", "RECAC", "GPU recovery action the driver asks for (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).", kErrors, false, false},
};
// clang-format on

// go-dcgm's legacy names (its legacyDCGMFields, as dcgm-exporter 4.5.3-4.8.2 pins it), which
// dcgm-exporter accepts in counters files — among them the lower-case names of
// 1.x-compatibility-metrics.csv — for the fields Vigil has. The catalogue's own older names are
// in FieldInfo::legacy_name.
struct LegacyName {
  std::string_view name;
  FieldId id;
};
// clang-format off
constexpr LegacyName kLegacyNames[] = {
    {"dcgm_sm_clock", 100},
    {"dcgm_memory_clock", 101},
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 112},
    {"dcgm_memory_temp", 140},
    {"dcgm_gpu_temp", 150},
    {"dcgm_power_usage", 155},
    {"dcgm_total_energy_consumption", 156},
    {"dcgm_pcie_replay_counter", 202},
    {"dcgm_gpu_utilization", 203},
    {"dcgm_mem_copy_utilization", 204},
    {"dcgm_enc_utilization", 206},
    {"dcgm_dec_utilization", 207},
    {"dcgm_xid_errors", 230},
    {"dcgm_power_violation", 240},
    {"dcgm_thermal_violation", 241},
    {"dcgm_sync_boost_violation", 242},
    {"dcgm_board_limit_violation", 243},
    {"dcgm_low_util_violation", 244},
    {"dcgm_reliability_violation", 245},
    {"dcgm_fb_free", 251},
    {"dcgm_fb_used", 252},
    {"dcgm_ecc_sbe_volatile_total", 310},
    {"dcgm_ecc_dbe_volatile_total", 311},
    {"dcgm_ecc_sbe_aggregate_total", 312},
    {"dcgm_ecc_dbe_aggregate_total", 313},
    {"dcgm_retired_pages_sbe", 390},
    {"dcgm_retired_pages_dbe", 391},
    {"dcgm_retired_pages_pending", 392},
    {"dcgm_nvlink_flit_crc_error_count_total", 409},
    {"dcgm_nvlink_data_crc_error_count_total", 419},
    {"dcgm_nvlink_replay_error_count_total", 429},
    {"dcgm_nvlink_recovery_error_count_total", 439},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", 440},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_L1", 441},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_L2", 442},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_L3", 443},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_L4", 444},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_L5", 445},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449},
    {"dcgm_nvlink_bandwidth_total", 449},
    {"dcgm_fi_prof_gr_engine_active", 1001},
    {"dcgm_fi_prof_sm_active", 1002},
    {"dcgm_fi_prof_sm_occupancy", 1003},
    {"dcgm_fi_prof_pipe_tensor_active", 1004},
    {"dcgm_fi_prof_dram_active", 1005},
    {"dcgm_fi_prof_pcie_tx_bytes", 1009},
    {"dcgm_fi_prof_pcie_rx_bytes", 1010},
};
// clang-format on

// Name (upper case) -> field, for every name and alias.
const std::unordered_map<std::string, const FieldInfo*>& NameIndex() {
  static const auto* const index = [] {
    auto* map = new std::unordered_map<std::string, const FieldInfo*>();
    for (const FieldInfo& field : kFields) {
      for (std::string_view name : {field.name, field.name_v46, field.legacy_name}) {
        if (!name.empty()) map->emplace(std::string(name), &field);
      }
    }
    for (const LegacyName& legacy : kLegacyNames) {
      const FieldInfo* field = FindField(legacy.id);
      VIGIL_CHECK(field != nullptr);  // the table lists only fields of the catalogue
      map->emplace(ToUpper(legacy.name), field);
    }
    return map;
  }();
  return *index;
}

}  // namespace

std::span<const FieldInfo> AllFields() { return kFields; }

const FieldInfo* FindField(FieldId id) {
  const auto* it = std::lower_bound(std::begin(kFields), std::end(kFields), id,
                                    [](const FieldInfo& f, FieldId v) { return f.id < v; });
  return it != std::end(kFields) && it->id == id ? it : nullptr;
}

bool SampledPerMigInstance(FieldId id) {
  return (id >= fid::kFbTotal && id <= fid::kFbReserved) ||
         (id >= fid::kProfGrEngineActive && id <= fid::kProfPipeFp16Active);
}

absl::Duration MinInterval(FieldId id) {
  // DcgmCacheManager.cpp: "For inforom checks, enforce a 30-second minimum to avoid excessive
  // CPU cycles" (minMonitorFrequenceUsec = 30000000).
  return id == fid::kInforomConfigValid ? kSlow : absl::ZeroDuration();
}

absl::StatusOr<const FieldInfo*> ResolveField(std::string_view reference) {
  const std::string_view trimmed = Trim(reference);
  if (trimmed.empty()) return absl::InvalidArgumentError("empty field name");
  if (std::isdigit(static_cast<unsigned char>(trimmed.front()))) {
    const std::optional<uint64_t> id = ParseUint64(trimmed);
    if (!id) return absl::InvalidArgumentError(fmt::format("'{}' is not a field ID", trimmed));
    if (*id <= UINT32_MAX) {
      if (const FieldInfo* field = FindField(static_cast<FieldId>(*id))) return field;
    }
    return absl::InvalidArgumentError(fmt::format(
        "unknown field ID {}: `vigil info --fields` lists the fields this engine samples", *id));
  }
  const auto& index = NameIndex();
  if (auto it = index.find(ToUpper(trimmed)); it != index.end()) return it->second;
  return absl::InvalidArgumentError(fmt::format(
      "unknown field '{}': use a DCGM field name (DCGM_FI_DEV_GPU_TEMP) or ID (150); `vigil info "
      "--fields` lists them",
      trimmed));
}

absl::StatusOr<std::vector<FieldId>> ResolveFieldList(std::string_view list) {
  std::vector<FieldId> ids;
  for (std::string_view item : Split(list, ',')) {
    absl::StatusOr<const FieldInfo*> field = ResolveField(item);
    if (!field.ok()) return field.status();
    if (std::find(ids.begin(), ids.end(), (*field)->id) == ids.end()) ids.push_back((*field)->id);
  }
  return ids;
}

}  // namespace vigil
