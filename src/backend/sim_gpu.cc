// Implements the simulated H100's model. Constants are those of an H100 SXM5 80GB in a DGX-class
// chassis: 700 W limit, ~70 W idle, 1980 MHz max SM clock, 2619 MHz HBM3, PCIe Gen5 x16.
#include "backend/sim_gpu.h"

#include <algorithm>
#include <cmath>

#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil {
namespace {

constexpr double kStepSeconds = 0.1;
constexpr double kPowerLimitW = 700;
constexpr double kIdlePowerW = 70;
constexpr double kMaxSmClockMhz = 1980;
constexpr double kIdleSmClockMhz = 345;
constexpr int64_t kMemClockMhz = 2619;
constexpr int64_t kFbTotalMib = 81559;
constexpr int64_t kFbReservedMib = 576;
constexpr double kThermalSlowdownC = 87;
constexpr double kThermalResistanceCPerW = 0.075;  // heat sink: ~52 C above ambient at 700 W
constexpr double kGpuThermalTauS = 40;
constexpr double kMemThermalTauS = 60;
constexpr int kWarmUpSteps = 3000;  // five simulated minutes

// PCI bus ids of the eight GPUs of a DGX H100.
constexpr int kDgxBuses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

double Approach(double current, double target, double tau_seconds) {
  return current + (target - current) * std::min(1.0, kStepSeconds / tau_seconds);
}

uint64_t Mix(uint64_t seed, uint64_t index, uint64_t stream) {
  // splitmix64 over the three inputs: different GPUs and streams get unrelated sequences.
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + index * 0xbf58476d1ce4e5b9ULL + stream;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

SimGpu::SimGpu(uint32_t index, uint64_t seed, const std::string& driver_version)
    : rng_(Mix(seed, index, 1)) {
  std::mt19937_64 identity_rng(Mix(seed, index, 2));
  auto hex = [&](int digits) {
    const uint64_t value = identity_rng();
    return fmt::format("{:0{}x}", value & ((digits >= 16) ? ~0ULL : ((1ULL << (4 * digits)) - 1)),
                       digits);
  };
  identity_.index = index;
  // One statement per part: argument evaluation order is unspecified, determinism is not.
  std::string uuid = "GPU-" + hex(8);
  for (int digits : {4, 4, 4, 12}) uuid += "-" + hex(digits);
  identity_.uuid = uuid;
  identity_.name = "NVIDIA H100 80GB HBM3";
  const int bus = index < std::size(kDgxBuses) ? kDgxBuses[index] : 0x100 + int(index);
  identity_.pci_bus_id = bus < 0x100 ? fmt::format("00000000:{:02X}:00.0", bus)
                                     : fmt::format("00000001:{:02X}:00.0", bus & 0xff);
  identity_.serial = fmt::format("165492201{:04d}", identity_rng() % 10000);
  identity_.driver_version = driver_version;
  identity_.memory_total_mib = kFbTotalMib;
  identity_.device = fmt::format("nvidia{}", index);

  // Hardware that has been in service for a while: some energy used, a few old corrected errors.
  std::uniform_real_distribution<double> unit(0, 1);
  ambient_c_ = 25 + 7 * unit(identity_rng);  // GPUs at the back of the chassis run warmer
  gpu_temp_c_ = ambient_c_ + kIdlePowerW * kThermalResistanceCPerW;
  mem_temp_c_ = gpu_temp_c_ + 4;
  energy_mj_ = std::floor((3 + 20 * unit(identity_rng)) * 86400 * 350 * 1000);  // days at ~350 W
  pcie_replays_ = static_cast<int64_t>(identity_rng() % 4);
  ecc_sbe_aggregate_ = static_cast<int64_t>(identity_rng() % 40);
  correctable_remapped_rows_ = static_cast<int64_t>(identity_rng() % 3);

  // The node was busy before the engine started: most GPUs are mid-job. Run the model for a few
  // simulated minutes so temperatures, memory and clocks start where that workload puts them.
  const double draw = Uniform(0, 1);
  EnterPhase(draw < 0.25   ? Phase::kIdle
             : draw < 0.35 ? Phase::kLoading
             : draw < 0.85 ? Phase::kTraining
             : draw < 0.95 ? Phase::kEval
                           : Phase::kCheckpoint);
  for (int i = 0; i < kWarmUpSteps; ++i) Step();
}

double SimGpu::Uniform(double low, double high) {
  return std::uniform_real_distribution<double>(low, high)(rng_);
}
double SimGpu::Normal(double mean, double stddev) {
  return std::normal_distribution<double>(mean, stddev)(rng_);
}
bool SimGpu::Chance(double probability) { return Uniform(0, 1) < probability; }

void SimGpu::EnterPhase(Phase phase) {
  phase_ = phase;
  auto seconds = [&](double low, double high) {
    return static_cast<int64_t>(Uniform(low, high) / kStepSeconds);
  };
  switch (phase) {
    case Phase::kIdle:
      phase_steps_left_ = seconds(20, 240);
      util_target_ = 0;
      intensity_ = 0.3;
      mem_target_mib_ = Uniform(0, 1) < 0.5 ? 0 : 512;
      break;
    case Phase::kLoading:
      phase_steps_left_ = seconds(10, 60);
      util_target_ = Uniform(5, 25);
      intensity_ = 0.5;
      mem_target_mib_ = Uniform(40'000, 76'000);
      break;
    case Phase::kTraining:
      phase_steps_left_ = seconds(120, 900);
      util_target_ = Uniform(93, 100);
      intensity_ = Uniform(0.85, 1.2);  // above ~1.0 the demand exceeds the power limit
      mem_target_mib_ = std::max(mem_used_mib_, Uniform(50'000, 78'000));
      break;
    case Phase::kEval:
      phase_steps_left_ = seconds(20, 120);
      util_target_ = Uniform(50, 75);
      intensity_ = Uniform(0.6, 0.8);
      break;
    case Phase::kCheckpoint:
      phase_steps_left_ = seconds(10, 40);
      util_target_ = Uniform(2, 10);
      intensity_ = 0.4;
      break;
  }
}

void SimGpu::AdvanceTo(absl::Time now) {
  if (!started_) {
    started_ = true;
    origin_ = now;
    return;
  }
  const int64_t target = (now - origin_) / kStep;
  const int64_t max_steps = kMaxCatchUp / kStep;
  if (target - steps_done_ > max_steps) steps_done_ = target - max_steps;
  while (steps_done_ < target) {
    Step();
    ++steps_done_;
  }
}

void SimGpu::Step() {
  // Workload phase machine: a training job loads, trains with evaluations and checkpoints, and
  // eventually ends; then the GPU idles until the next job.
  if (--phase_steps_left_ <= 0) {
    switch (phase_) {
      case Phase::kIdle:
        EnterPhase(Phase::kLoading);
        break;
      case Phase::kLoading:
        EnterPhase(Phase::kTraining);
        break;
      case Phase::kTraining:
        EnterPhase(Chance(0.5) ? Phase::kEval : Phase::kCheckpoint);
        break;
      case Phase::kEval:
        EnterPhase(Phase::kTraining);
        break;
      case Phase::kCheckpoint:
        EnterPhase(Chance(0.3) ? Phase::kIdle : Phase::kTraining);
        break;
    }
  }

  // Utilisation: approaches its target, with noise and, while training, short dips (all-reduce,
  // data stalls).
  double target = util_target_;
  if (phase_ == Phase::kTraining) {
    if (dip_steps_left_ > 0) {
      --dip_steps_left_;
      target = util_target_ * 0.55;
    } else if (Chance(0.004)) {
      dip_steps_left_ = static_cast<int64_t>(Uniform(5, 25));
    }
  }
  const double noise = phase_ == Phase::kIdle ? 0.0 : Normal(0, 1.5);
  util_ = std::clamp(Approach(util_, target, 1.0) + noise * 0.3, 0.0, 100.0);
  mem_copy_util_ = std::clamp(Approach(mem_copy_util_, util_ * 0.45 * intensity_, 1.0), 0.0, 100.0);
  mem_used_mib_ = Approach(mem_used_mib_, mem_target_mib_, phase_ == Phase::kLoading ? 8 : 3);

  // Power follows utilisation and kernel intensity; the limit caps it.
  const double load = std::pow(util_ / 100, 1.3) * intensity_;
  const double demand_w =
      kIdlePowerW + (kPowerLimitW - kIdlePowerW) * (0.1 * mem_copy_util_ / 100 + 0.9 * load);
  const bool power_capped = demand_w > kPowerLimitW;
  const double power_target = power_capped ? kPowerLimitW - std::abs(Normal(4, 2)) : demand_w;
  power_w_ = std::clamp(Approach(power_w_, power_target, 0.3) + Normal(0, 1.5), kIdlePowerW * 0.9,
                        kPowerLimitW);

  // Temperature lags power.
  gpu_temp_c_ =
      Approach(gpu_temp_c_, ambient_c_ + power_w_ * kThermalResistanceCPerW, kGpuThermalTauS);
  mem_temp_c_ = Approach(mem_temp_c_, ambient_c_ + 6 + power_w_ * 0.06 + mem_copy_util_ * 0.08,
                         kMemThermalTauS);
  const bool thermal_slowdown = gpu_temp_c_ > kThermalSlowdownC;

  // Clocks: idle clock when idle, boost under load, pulled down by power capping and thermal
  // slowdown; the reasons bitmask says why.
  clock_reasons_ = 0;
  double clock_target = kMaxSmClockMhz;
  if (util_ < 1) {
    clock_target = kIdleSmClockMhz;
    clock_reasons_ |= clock_event::kGpuIdle;
  }
  if (power_capped) {
    clock_target *= std::clamp(std::pow(kPowerLimitW / demand_w, 0.8), 0.6, 1.0);
    clock_reasons_ |= clock_event::kSwPowerCap;
    power_violation_ns_ += absl::ToInt64Nanoseconds(kStep);
  }
  if (thermal_slowdown) {
    clock_target *= 0.9;
    clock_reasons_ |= clock_event::kSwThermal;
    thermal_violation_ns_ += absl::ToInt64Nanoseconds(kStep);
  }
  sm_clock_mhz_ = Approach(sm_clock_mhz_, clock_target, 0.2);

  // Bus traffic: loading reads from the host, checkpoints write to it, training all-reduces over
  // NVLink.
  double rx = 2e6, tx = 1e6, nvlink = 0;
  switch (phase_) {
    case Phase::kLoading:
      rx = 14e9;
      tx = 0.4e9;
      break;
    case Phase::kTraining:
      rx = 1.2e9;
      tx = 0.3e9;
      nvlink = 180e9 * util_ / 100;
      break;
    case Phase::kEval:
      rx = 0.8e9;
      tx = 0.1e9;
      nvlink = 20e9;
      break;
    case Phase::kCheckpoint:
      rx = 0.2e9;
      tx = 11e9;
      break;
    case Phase::kIdle:
      break;
  }
  pcie_rx_bps_ = std::max(0.0, Approach(pcie_rx_bps_, rx, 1.0) * Uniform(0.97, 1.03));
  pcie_tx_bps_ = std::max(0.0, Approach(pcie_tx_bps_, tx, 1.0) * Uniform(0.97, 1.03));
  nvlink_rx_bps_ = std::max(0.0, Approach(nvlink_rx_bps_, nvlink, 0.5) * Uniform(0.97, 1.03));
  nvlink_tx_bps_ = nvlink_rx_bps_ * Uniform(0.98, 1.02);

  // Counters.
  energy_mj_ += power_w_ * kStepSeconds * 1000;
  // Corrected errors happen on healthy hardware too, rarely: a PCIe replay every few hours and a
  // corrected single-bit ECC error a few times a day. Neither trips DCGM's health rules.
  if (Chance(kStepSeconds / (3 * 3600))) ++pcie_replays_;
  if (Chance(kStepSeconds / (8 * 3600))) {
    ++ecc_sbe_volatile_;
    ++ecc_sbe_aggregate_;
  }
}

void SimGpu::Reset() {
  energy_mj_ = 0;
  ecc_sbe_volatile_ = 0;
}

FieldValue SimGpu::Activity(FieldId field, double busy, double dram) const {
  const bool training = phase_ == Phase::kTraining;
  switch (field) {
    case fid::kProfGrEngineActive:
      return FieldValue::Double(busy * 0.97);
    case fid::kProfSmActive:
      return FieldValue::Double(busy * 0.9);
    case fid::kProfSmOccupancy:
      return FieldValue::Double(busy * 0.9 * (training ? 0.45 : 0.3));
    case fid::kProfPipeTensorActive:
      return FieldValue::Double(training ? busy * 0.55 * intensity_ : busy * 0.1);
    case fid::kProfDramActive:
      return FieldValue::Double(dram);
    case fid::kProfPipeFp64Active:
      return FieldValue::Double(0);
    case fid::kProfPipeFp32Active:
      return FieldValue::Double(busy * 0.12);
    case fid::kProfPipeFp16Active:
      return FieldValue::Double(training ? busy * 0.08 : 0);
    default:
      return FieldValue::Error(ValueStatus::kNotSupported);
  }
}

FieldValue SimGpu::ReadInstance(const MigInstance& instance, FieldId field) const {
  // The instance's share of the GPU's load: between 0.1 and 1.1 of it, drifting with a period
  // of 5 to 20 minutes set by its GPU instance id, deterministic in the model's time.
  const double seconds = static_cast<double>(steps_done_) * absl::ToDoubleSeconds(kStep);
  const double period = 300 + 97.0 * (instance.gpu_instance_id % 10);
  const double share =
      0.6 + 0.5 * std::sin(2 * M_PI * seconds / period + 1.3 * instance.gpu_instance_id);
  const double busy = std::clamp(util_ / 100 * share, 0.0, 1.0);
  const auto total = static_cast<int64_t>(instance.memory_total_mib);
  const int64_t reserved = kFbReservedMib * instance.placement_size / kMigMemorySlices;
  const int64_t used =
      std::clamp(static_cast<int64_t>(mem_used_mib_ / kFbTotalMib * static_cast<double>(total) *
                                      std::clamp(share, 0.2, 1.0)),
                 int64_t{0}, total - reserved);
  switch (field) {
    case fid::kFbTotal:
      return FieldValue::Int(total);
    case fid::kFbUsed:
      return FieldValue::Int(used);
    case fid::kFbFree:
      return FieldValue::Int(total - reserved - used);
    case fid::kFbReserved:
      return FieldValue::Int(reserved);
    default:
      return Activity(field, busy, std::min(1.0, mem_copy_util_ / 100 * 1.2 * share));
  }
}

FieldValue SimGpu::Read(FieldId field) const {
  const double util = util_;
  const double busy = util / 100;
  switch (field) {
    case fid::kDriverVersion:
      return FieldValue::String(identity_.driver_version);
    case fid::kNvmlVersion:
      return FieldValue::String("12." + identity_.driver_version);
    case fid::kName:
      return FieldValue::String(identity_.name);
    case fid::kBrand:
      return FieldValue::String("NVIDIA");
    case fid::kSerial:
      return FieldValue::String(identity_.serial);
    case fid::kUuid:
      return FieldValue::String(identity_.uuid);
    case fid::kMinorNumber:
      return FieldValue::Int(identity_.index);
    case fid::kPciBusId:
      return FieldValue::String(identity_.pci_bus_id);
    case fid::kInforomConfigValid:
      return FieldValue::Int(1);
    case fid::kVbiosVersion:
      return FieldValue::String("96.00.99.00.01");
    case fid::kSmClock:
      // Real clocks move in 15 MHz bins.
      return FieldValue::Int(static_cast<int64_t>(std::round(sm_clock_mhz_ / 15) * 15));
    case fid::kMemClock:
      return FieldValue::Int(kMemClockMhz);
    case fid::kClocksEventReasons:
      return FieldValue::Int(clock_reasons_);
    case fid::kMaxSmClock:
      return FieldValue::Int(static_cast<int64_t>(kMaxSmClockMhz));
    case fid::kMaxMemClock:
      return FieldValue::Int(kMemClockMhz);
    case fid::kMemoryTemp:
      return FieldValue::Int(static_cast<int64_t>(std::lround(mem_temp_c_)));
    case fid::kGpuTemp:
      return FieldValue::Int(static_cast<int64_t>(std::lround(gpu_temp_c_)));
    case fid::kPowerUsage:
      return FieldValue::Double(std::round(power_w_ * 1000) / 1000);  // NVML reports mW
    case fid::kTotalEnergy:
      return FieldValue::Int(static_cast<int64_t>(energy_mj_));
    case fid::kPowerMgmtLimit:
    case fid::kEnforcedPowerLimit:
      return FieldValue::Double(kPowerLimitW);
    case fid::kPstate:
      return FieldValue::Int(phase_ == Phase::kIdle && mem_used_mib_ < 1024 ? 8 : 0);
    case fid::kFanSpeed:  // SXM boards are cooled by the chassis: no fan to report
      return FieldValue::Error(ValueStatus::kNotSupported);
    case fid::kPcieReplayCounter:
      return FieldValue::Int(pcie_replays_);
    case fid::kGpuUtil:
      return FieldValue::Int(static_cast<int64_t>(std::lround(util)));
    case fid::kMemCopyUtil:
      return FieldValue::Int(static_cast<int64_t>(std::lround(mem_copy_util_)));
    case fid::kEncUtil:
    case fid::kDecUtil:
      return FieldValue::Int(0);
    case fid::kPcieMaxLinkGen:
    case fid::kPcieLinkGen:
      return FieldValue::Int(5);
    case fid::kPcieMaxLinkWidth:
    case fid::kPcieLinkWidth:
      return FieldValue::Int(16);
    case fid::kPowerViolation:
      return FieldValue::Int(power_violation_ns_);
    case fid::kThermalViolation:
      return FieldValue::Int(thermal_violation_ns_);
    case fid::kSyncBoostViolation:
    case fid::kBoardLimitViolation:
    case fid::kLowUtilViolation:
    case fid::kReliabilityViolation:
      return FieldValue::Int(0);
    case fid::kFbTotal:
      return FieldValue::Int(kFbTotalMib);
    case fid::kFbUsed:
      return FieldValue::Int(static_cast<int64_t>(mem_used_mib_));
    case fid::kFbFree:
      return FieldValue::Int(kFbTotalMib - kFbReservedMib - static_cast<int64_t>(mem_used_mib_));
    case fid::kFbReserved:
      return FieldValue::Int(kFbReservedMib);
    case fid::kEccCurrent:
      return FieldValue::Int(1);
    case fid::kEccSbeVolTotal:
      return FieldValue::Int(ecc_sbe_volatile_);
    case fid::kEccSbeAggTotal:
      return FieldValue::Int(ecc_sbe_aggregate_);
    case fid::kEccDbeVolTotal:
    case fid::kEccDbeAggTotal:
    case fid::kRetiredSbe:
    case fid::kRetiredDbe:
    case fid::kRetiredPending:
    case fid::kUncorrectableRemappedRows:
    case fid::kRowRemapFailure:
    case fid::kRowRemapPending:
    case fid::kNvlinkCrcFlitErrors:
    case fid::kNvlinkCrcDataErrors:
    case fid::kNvlinkReplayErrors:
    case fid::kNvlinkRecoveryErrors:
    case fid::kMemoryUnrepairable:
    case fid::kGpuRecoveryAction:
      return FieldValue::Int(0);
    case fid::kCorrectableRemappedRows:
      return FieldValue::Int(correctable_remapped_rows_);
    case fid::kOemInforomVersion:
      return FieldValue::String("2.1");
    case fid::kEccInforomVersion:
      return FieldValue::String("7.16");
    case fid::kPowerInforomVersion:
      return FieldValue::String("N/A");  // H100 SXM boards have no power object
    case fid::kInforomImageVersion:
      return FieldValue::String("G520.0200.00.05");
    case fid::kNvlinkBandwidthL0:
    case fid::kNvlinkBandwidthL0 + 1:
    case fid::kNvlinkBandwidthL0 + 2:
    case fid::kNvlinkBandwidthL0 + 3:
    case fid::kNvlinkBandwidthL0 + 4:
    case fid::kNvlinkBandwidthL5:  // one of the H100's 18 links, which share the traffic evenly
      return FieldValue::Int(
          static_cast<int64_t>(std::llround((nvlink_rx_bps_ + nvlink_tx_bps_) / 18 / 1024 / 1000)));
    case fid::kNvlinkBandwidthTotal:  // DCGM's unit: KiB/s divided by 1000
      return FieldValue::Int(
          static_cast<int64_t>(std::llround((nvlink_rx_bps_ + nvlink_tx_bps_) / 1024 / 1000)));
    case fid::kVgpuLicenseStatus:  // bare metal, not a vGPU
      return FieldValue::Error(ValueStatus::kNotSupported);
    case fid::kProfPcieTxBytes:
      return FieldValue::Int(static_cast<int64_t>(pcie_tx_bps_));
    case fid::kProfPcieRxBytes:
      return FieldValue::Int(static_cast<int64_t>(pcie_rx_bps_));
    case fid::kProfNvlinkTxBytes:
      return FieldValue::Int(static_cast<int64_t>(nvlink_tx_bps_));
    case fid::kProfNvlinkRxBytes:
      return FieldValue::Int(static_cast<int64_t>(nvlink_rx_bps_));
    default:
      return Activity(field, busy, std::min(1.0, mem_copy_util_ / 100 * 1.2));
  }
}

}  // namespace vigil
