// The rule table: DCGM's health watches as Vigil applies them (docs/health.md has the list and
// the sources). Each evaluate function reads only its rule's inputs through the context.
#include "health/rules.h"

#include <algorithm>

#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil {
namespace {

constexpr char kResetAction[] =
    "drain the node's workloads and reset the GPU (nvidia-smi -r), or reboot the node";
constexpr char kReplaceAction[] = "replace the GPU (RMA)";
constexpr char kNvlinkResetAction[] =
    "drain the node, reset the GPUs of the NVLink domain; replace the part if it recurs";

std::string Window(const RuleContext& c) { return absl::FormatDuration(c.policy().window); }

// DCGM's PCIe replay allowance per lane per minute, by link generation.
double ReplaysPerLanePerMinute(int64_t generation) {
  static constexpr double kRates[] = {0.15, 0.3, 0.48, 0.96, 1.92, 3.84};
  const int64_t index = std::clamp<int64_t>(generation, 1, 6) - 1;
  return kRates[index];
}

// PCIe: replays in the window above the allowance for the link's generation and width.
void PcieReplayRate(RuleContext& c) {
  bool injected = false;
  const auto replays = c.WindowDelta(fid::kPcieReplayCounter, &injected);
  const FieldValue& gen = c.Value(fid::kPcieLinkGen);
  const FieldValue& width = c.Value(fid::kPcieLinkWidth);
  if (!replays || !gen.ok() || !width.ok() || width.as_int() <= 0) return;
  const double limit = ReplaysPerLanePerMinute(gen.as_int()) * width.as_int() *
                       absl::ToDoubleSeconds(c.policy().window) / 60.0;
  if (*replays <= limit) return;
  c.Raise(HealthStatus::kWarn, "pcie.replay_rate", "DCGM_FR_PCI_REPLAY_RATE",
          fmt::format("{} PCIe replays in the last {}, above the {:.1f} allowed for a Gen{} x{} "
                      "link",
                      *replays, Window(c), limit, gen.as_int(), width.as_int()),
          "check the PCIe link (lspci -vv, riser, slot); reseat or replace the GPU if it "
          "persists",
          RecommendedAction::kInspect, injected || gen.injected || width.injected);
}

void VolatileDbe(RuleContext& c) {
  const FieldValue& dbe = c.Value(fid::kEccDbeVolTotal);
  if (!dbe.ok() || dbe.as_int() <= 0) return;
  c.Raise(HealthStatus::kFail, "memory.volatile_dbe", "DCGM_FR_VOLATILE_DBE_DETECTED",
          fmt::format("{} uncorrectable (double-bit) ECC error{} since the driver loaded",
                      dbe.as_int(), dbe.as_int() == 1 ? "" : "s"),
          kResetAction, RecommendedAction::kResetGpu, dbe.injected);
}

void PendingRetirement(RuleContext& c) {
  const FieldValue& pending = c.Value(fid::kRetiredPending);
  if (!pending.ok() || pending.as_int() <= 0) return;
  c.Raise(HealthStatus::kWarn, "memory.pending_retirement", "DCGM_FR_PENDING_PAGE_RETIREMENTS",
          "memory pages are pending retirement",
          "reset the GPU at the next maintenance window so the retirement takes effect",
          RecommendedAction::kResetGpu, pending.injected);
}

void RetiredPages(RuleContext& c) {
  const FieldValue& sbe = c.Value(fid::kRetiredSbe);
  const FieldValue& dbe = c.Value(fid::kRetiredDbe);
  if (!sbe.ok() || !dbe.ok() || sbe.as_int() + dbe.as_int() < c.policy().retired_pages_fail) {
    return;
  }
  c.Raise(
      HealthStatus::kFail, "memory.retired_pages", "DCGM_FR_RETIRED_PAGES_LIMIT",
      fmt::format("{} retired pages ({} single-bit, {} double-bit), at or above the limit of {}",
                  sbe.as_int() + dbe.as_int(), sbe.as_int(), dbe.as_int(),
                  c.policy().retired_pages_fail),
      kReplaceAction, RecommendedAction::kInspect, sbe.injected || dbe.injected);
}

void RetiredDbePages(RuleContext& c) {
  const FieldValue& dbe = c.Value(fid::kRetiredDbe);
  if (!dbe.ok() || dbe.as_int() <= c.policy().retired_dbe_pages_fail) return;
  c.Raise(HealthStatus::kFail, "memory.retired_dbe_pages", "DCGM_FR_RETIRED_PAGES_DBE_LIMIT",
          fmt::format("{} pages retired for double-bit errors, above the limit of {}", dbe.as_int(),
                      c.policy().retired_dbe_pages_fail),
          kReplaceAction, RecommendedAction::kInspect, dbe.injected);
}

void RowRemapFailure(RuleContext& c) {
  const FieldValue& failed = c.Value(fid::kRowRemapFailure);
  if (!failed.ok() || failed.as_int() <= 0) return;
  c.Raise(HealthStatus::kFail, "memory.row_remap_failure", "DCGM_FR_ROW_REMAP_FAILURE",
          "row remapping failed: the GPU ran out of spare rows", kReplaceAction,
          RecommendedAction::kInspect, failed.injected);
}

void UncorrectableRows(RuleContext& c) {
  const FieldValue& rows = c.Value(fid::kUncorrectableRemappedRows);
  if (!rows.ok() || rows.as_int() < c.policy().uncorrectable_rows_warn) return;
  c.Raise(HealthStatus::kWarn, "memory.uncorrectable_rows", "DCGM_FR_UNCORRECTABLE_ROW_REMAP",
          fmt::format("{} rows remapped for uncorrectable errors (warning at {})", rows.as_int(),
                      c.policy().uncorrectable_rows_warn),
          "plan to replace the GPU; it is running out of spare rows", RecommendedAction::kInspect,
          rows.injected);
}

void Unrepairable(RuleContext& c) {
  const FieldValue& unrepairable = c.Value(fid::kMemoryUnrepairable);
  if (!unrepairable.ok() || unrepairable.as_int() <= 0) return;
  c.Raise(HealthStatus::kFail, "memory.unrepairable", "DCGM_FR_FAULTY_MEMORY",
          "the GPU reports memory it cannot repair", kReplaceAction, RecommendedAction::kInspect,
          unrepairable.injected);
}

void InforomCorrupt(RuleContext& c) {
  const FieldValue& valid = c.Value(fid::kInforomConfigValid);
  if (!valid.ok() || valid.as_int() != 0) return;
  c.Raise(HealthStatus::kWarn, "inforom.corrupt", "DCGM_FR_CORRUPT_INFOROM",
          "the infoROM checksums do not match (corrupt infoROM)",
          "update the infoROM/VBIOS with NVIDIA's tools, or replace the board",
          RecommendedAction::kInspect, valid.injected);
}

// Thermal and power: time spent throttled within the window.
void Violation(RuleContext& c, FieldId field, double fraction_limit, const char* key,
               const char* code, const char* what, const char* action) {
  bool injected = false;
  const auto ns = c.WindowDelta(field, &injected);
  if (!ns || *ns <= 0) return;
  const double fraction = static_cast<double>(*ns) / absl::ToDoubleNanoseconds(c.policy().window);
  if (fraction < fraction_limit) return;
  c.Raise(HealthStatus::kWarn, key, code,
          fmt::format("throttled for {} for {:.1f} s of the last {} ({:.0f}%)", what, *ns / 1e9,
                      Window(c), fraction * 100),
          action, RecommendedAction::kInspect, injected);
}

void ThermalViolation(RuleContext& c) {
  Violation(c, fid::kThermalViolation, c.policy().thermal_violation_fraction, "thermal.violation",
            "DCGM_FR_CLOCKS_EVENT_THERMAL", "temperature",
            "check cooling: fans, airflow, inlet temperature, blocked heat sinks");
}

void PowerViolation(RuleContext& c) {
  Violation(c, fid::kPowerViolation, c.policy().power_violation_fraction, "power.violation",
            "DCGM_FR_CLOCKS_EVENT_POWER", "power",
            "check the power limit (nvidia-smi -q -d POWER) and the node's power supply");
}

// NVLink CRC errors: WARN at a count in the window, FAIL at a rate.
void NvlinkCrc(RuleContext& c) {
  bool injected = false;
  const auto flit = c.WindowDelta(fid::kNvlinkCrcFlitErrors, &injected);
  const auto data = c.WindowDelta(fid::kNvlinkCrcDataErrors, &injected);
  const int64_t crc = flit.value_or(0) + data.value_or(0);
  if ((!flit && !data) || crc <= 0) return;
  // The rate over the span the samples actually cover (at least a second).
  const double span_s = absl::ToDoubleSeconds(c.WindowSpan(fid::kNvlinkCrcFlitErrors));
  const double rate = crc / span_s;
  if (rate >= c.policy().nvlink_crc_fail_rate) {
    c.Raise(HealthStatus::kFail, "nvlink.crc_rate", "DCGM_FR_NVLINK_ERROR_CRITICAL",
            fmt::format("{} NVLink CRC errors in {:.0f} s ({:.0f}/s, failing at {:.0f}/s)", crc,
                        span_s, rate, c.policy().nvlink_crc_fail_rate),
            kNvlinkResetAction, RecommendedAction::kResetGpu, injected);
  } else if (crc >= c.policy().nvlink_crc_warn_count) {
    c.Raise(HealthStatus::kWarn, "nvlink.crc", "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD",
            fmt::format("{} NVLink CRC errors in the last {}", crc, Window(c)),
            "watch the NVLink counters (nvidia-smi nvlink -e); reset the GPUs if they keep "
            "growing",
            RecommendedAction::kInspect, injected);
  }
}

void NvlinkReplayRecovery(RuleContext& c) {
  bool injected = false;
  const auto replays = c.WindowDelta(fid::kNvlinkReplayErrors, &injected);
  const auto recoveries = c.WindowDelta(fid::kNvlinkRecoveryErrors, &injected);
  if (replays.value_or(0) <= 0 && recoveries.value_or(0) <= 0) return;
  c.Raise(HealthStatus::kFail, "nvlink.replay_recovery", "DCGM_FR_NVLINK_ERROR_THRESHOLD",
          fmt::format("{} NVLink replay and {} recovery errors in the last {}", replays.value_or(0),
                      recoveries.value_or(0), Window(c)),
          kNvlinkResetAction, RecommendedAction::kResetGpu, injected);
}

// The GPU recovery action the driver asks for.
void RecoveryAction(RuleContext& c) {
  const FieldValue& action = c.Value(fid::kGpuRecoveryAction);
  if (!action.ok() || action.as_int() <= 0 || action.as_int() > 4) return;
  struct Recovery {
    HealthStatus status;
    const char* code;
    const char* what;
    const char* action;
    RecommendedAction recommended;
  };
  static const Recovery kRecoveries[] = {
      {HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_RESET", "a GPU reset",
       "drain the node's workloads and reset the GPU (nvidia-smi -r)",
       RecommendedAction::kResetGpu},
      {HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_REBOOT", "a node reboot",
       "drain the node and reboot it", RecommendedAction::kReboot},
      {HealthStatus::kWarn, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P", "draining peer-to-peer traffic",
       "stop peer-to-peer (NVLink/PCIe P2P) workloads on this GPU", RecommendedAction::kRestartApp},
      {HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_DRAIN_RESET",
       "draining peer-to-peer traffic and a GPU reset",
       "drain the node's workloads and reset the GPU (nvidia-smi -r)",
       RecommendedAction::kResetGpu},
  };
  const Recovery& recovery = kRecoveries[action.as_int() - 1];
  c.Raise(
      recovery.status, "driver.recovery_action", recovery.code,
      fmt::format("the driver asks for {} (recovery action {})", recovery.what, action.as_int()),
      recovery.action, recovery.recommended, action.injected);
}

// The GPU's fabric on an NVSwitch system, as DCGM's NVLink watch judges it
// (DcgmHealthWatch.cpp, MonitorFabricFields): the fabric manager's training not done, failed
// or unknown FAILs (DCGM_FR_FABRIC_PROBE_STATE), still in progress WARNs; any fault the health
// mask reports FAILs (DCGM_FR_FIELD_VIOLATION). With the fabric down CUDA fails on every GPU
// while every other system passes. Held only while it lasts: a fabric manager that finishes its
// training, or is started, ends it without a GPU reset.
void Fabric(RuleContext& c) {
  const FieldValue& status = c.Value(fid::kFabricManagerStatus);
  constexpr char kFabricAction[] =
      "check the fabric manager (systemctl status nvidia-fabricmanager; its log) and that the "
      "NVSwitches are healthy; the GPUs cannot run CUDA until the fabric is trained";
  if (status.ok() && status.as_int() != 0 && status.as_int() != 3) {
    static constexpr const char* kStates[] = {"Not Supported", "Not Started", "In Progress",
                                              "Success",       "Failure",     "Unrecognized",
                                              "NVML Too Old"};
    const int64_t value = status.as_int();
    const char* name = value >= 0 && value < 7 ? kStates[value] : "Unknown";
    c.RaiseWhileItHolds(value == 2 ? HealthStatus::kWarn : HealthStatus::kFail, "nvlink.fabric",
                        "DCGM_FR_FABRIC_PROBE_STATE",
                        fmt::format("Fabric State is {} ({}){}", name, value,
                                    value == 2 ? ": the fabric manager is still training" : ""),
                        kFabricAction, RecommendedAction::kInspect, status.injected);
  }
  const FieldValue& mask = c.Value(fid::kFabricHealthMask);
  if (!mask.ok()) return;
  // NVML_GPU_FABRIC_HEALTH_MASK_*: two bits each, 1 = TRUE (nvml.h 12.x/13.x).
  struct Part {
    int shift;
    const char* what;
  };
  static constexpr Part kParts[] = {{0, "Bandwidth Degraded"},
                                    {2, "Route Recovery"},
                                    {4, "Route Unhealthy"},
                                    {6, "Access Timeout Recovery"}};
  std::string faults;
  for (const Part& part : kParts) {
    if (((mask.as_int() >> part.shift) & 0x3) == 1) {
      faults += fmt::format("{}{}", faults.empty() ? "" : ", ", part.what);
    }
  }
  // Incorrect configuration (4 bits from bit 8, nvml.h 13): 0 not supported, 1 none.
  if (const int64_t configuration = (mask.as_int() >> 8) & 0xf; configuration > 1) {
    faults +=
        fmt::format("{}Incorrect Configuration ({})", faults.empty() ? "" : ", ", configuration);
  }
  if (faults.empty()) return;
  c.RaiseWhileItHolds(HealthStatus::kFail, "nvlink.fabric_health", "DCGM_FR_FIELD_VIOLATION",
                      fmt::format("Fabric Health: {} (health mask {:#x})", faults, mask.as_int()),
                      kFabricAction, RecommendedAction::kInspect, mask.injected);
}

// A GPU that stopped answering, as a whole.
void GpuRead(RuleContext& c) {
  const ValueStatus read = c.GpuRead();
  if (read == ValueStatus::kGpuLost) {
    c.Raise(HealthStatus::kFail, "driver.gpu_lost", "DCGM_FR_FALLEN_OFF_BUS",
            "the GPU stopped answering the driver (lost / fallen off the bus)",
            "drain the node and restart it; check the GPU's seating, power and PCIe link if it "
            "recurs",
            RecommendedAction::kReboot, false);
  } else if (read == ValueStatus::kResetRequired) {
    // NVML_ERROR_RESET_REQUIRED from the GPU's calls: the driver serves it again only after a
    // reset (gpud: "GPU requires reset"). DCGM's code for the driver asking a reset.
    c.Raise(HealthStatus::kFail, "driver.reset_required", "DCGM_FR_GPU_RECOVERY_RESET",
            "the driver answers that the GPU needs a reset before it can be used again",
            "drain the GPU's workloads and reset it (vigil reset-gpu, or nvidia-smi -r); reboot "
            "the node if the reset fails",
            RecommendedAction::kResetGpu, false);
  } else if (read == ValueStatus::kTimeout) {
    // A driver call that hangs often comes before a GPU falls off the bus or a GSP timeout
    // (XID 119), but a slow call alone is no proof of a fault: WARN while it lasts, and the
    // systems read UNKNOWN because their data is not fresh.
    c.Raise(HealthStatus::kWarn, "driver.gpu_unresponsive", "",
            "the driver did not answer a query for this GPU in time: its readings are stale",
            "check the kernel log (dmesg) for XIDs and NVRM messages; if calls keep hanging, "
            "drain the node and reset the GPU or reboot",
            RecommendedAction::kInspect, false);
  }
}

}  // namespace

const std::vector<HealthRule>& HealthRules() {
  using S = HealthSystem;
  static const auto* const rules = new std::vector<HealthRule>{
      {"pcie.replay_rate",
       S::kPcie,
       {fid::kPcieReplayCounter, fid::kPcieLinkGen, fid::kPcieLinkWidth},
       PcieReplayRate},
      {"memory.volatile_dbe", S::kMemory, {fid::kEccDbeVolTotal}, VolatileDbe},
      {"memory.pending_retirement", S::kMemory, {fid::kRetiredPending}, PendingRetirement},
      {"memory.retired_pages", S::kMemory, {fid::kRetiredSbe, fid::kRetiredDbe}, RetiredPages},
      {"memory.retired_dbe_pages", S::kMemory, {fid::kRetiredDbe}, RetiredDbePages},
      {"memory.row_remap_failure", S::kMemory, {fid::kRowRemapFailure}, RowRemapFailure},
      {"memory.uncorrectable_rows",
       S::kMemory,
       {fid::kUncorrectableRemappedRows},
       UncorrectableRows},
      {"memory.unrepairable", S::kMemory, {fid::kMemoryUnrepairable}, Unrepairable},
      {"inforom.corrupt", S::kInforom, {fid::kInforomConfigValid}, InforomCorrupt},
      {"thermal.violation", S::kThermal, {fid::kThermalViolation}, ThermalViolation},
      {"power.violation", S::kPower, {fid::kPowerViolation}, PowerViolation},
      {"nvlink.crc", S::kNvlink, {fid::kNvlinkCrcFlitErrors, fid::kNvlinkCrcDataErrors}, NvlinkCrc},
      {"nvlink.replay_recovery",
       S::kNvlink,
       {fid::kNvlinkReplayErrors, fid::kNvlinkRecoveryErrors},
       NvlinkReplayRecovery},
      {"driver.recovery_action", S::kDriver, {fid::kGpuRecoveryAction}, RecoveryAction},
      {"nvlink.fabric", S::kNvlink, {fid::kFabricManagerStatus, fid::kFabricHealthMask}, Fabric},
      {"driver.gpu_read", S::kDriver, {}, GpuRead},
  };
  return *rules;
}

const std::vector<FieldId>& InputsOf(HealthSystem system) {
  static const auto* const inputs = [] {
    auto* by_system = new std::vector<std::vector<FieldId>>(std::size(kHealthSystems));
    for (const HealthRule& rule : HealthRules()) {
      std::vector<FieldId>& fields = (*by_system)[static_cast<size_t>(rule.system)];
      for (FieldId field : rule.inputs) {
        if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
          fields.push_back(field);
        }
      }
    }
    return by_system;
  }();
  return (*inputs)[static_cast<size_t>(system)];
}

}  // namespace vigil
