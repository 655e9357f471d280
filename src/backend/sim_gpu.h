// The physical model of one simulated GPU (an H100 SXM5 80GB): workload phases drive
// utilisation, utilisation drives power, power drives temperature with thermal lag; clocks follow
// load, power capping and thermal slowdown; counters only grow.
//
// Determinism: the state advances in fixed 100 ms steps from the first AdvanceTo() time, and only
// Step() draws random numbers, so the values read at a given time depend only on the seed, the
// GPU index and that time — not on which fields were read or how often.
// Not thread-safe: SimBackend serialises access.
#pragma once

#include <cstdint>
#include <random>

#include "absl/time/time.h"
#include "backend/backend.h"
#include "fields/value.h"

namespace vigil {

class SimGpu {
 public:
  static constexpr absl::Duration kStep = absl::Milliseconds(100);
  // A jump larger than this (e.g. a suspended VM) is not simulated step by step.
  static constexpr absl::Duration kMaxCatchUp = absl::Hours(2);

  SimGpu(uint32_t index, uint64_t seed, const std::string& driver_version);

  const GpuIdentity& identity() const { return identity_; }

  // Runs the model up to `now`. Times before the last step are ignored (state never goes back).
  void AdvanceTo(absl::Time now);

  // The field's current value; kNotSupported for fields an H100 SXM cannot provide.
  FieldValue Read(FieldId field) const;
  // The field's current value in one MIG GPU instance of this GPU, for the fields sampled per
  // instance (SampledPerMigInstance; kNotSupported for the others). Each instance runs a share of
  // the GPU's workload that drifts on a period of its own, so instances differ; its framebuffer
  // is its own memory slices'.
  FieldValue ReadInstance(const MigInstance& instance, FieldId field) const;

  // A GPU reset: the counters a reset (or driver reload) zeroes start again from zero — the
  // volatile ECC counts and the energy total. The rest (aggregate ECC, remapped rows) is kept in
  // the GPU's InfoROM and survives. Does not advance the model.
  void Reset();

  enum class Phase { kIdle, kLoading, kTraining, kEval, kCheckpoint };
  Phase phase() const { return phase_; }

 private:
  void Step();
  // The profiling activity ratios (1001-1008) at `busy` (0-1) and `dram` activity, for the GPU
  // or one of its instances; kNotSupported for any other field.
  FieldValue Activity(FieldId field, double busy, double dram) const;
  void EnterPhase(Phase phase);
  double Uniform(double low, double high);
  double Normal(double mean, double stddev);
  bool Chance(double probability);

  GpuIdentity identity_;
  std::mt19937_64 rng_;

  bool started_ = false;
  absl::Time origin_;
  int64_t steps_done_ = 0;

  // Workload.
  Phase phase_ = Phase::kIdle;
  int64_t phase_steps_left_ = 0;
  double util_target_ = 0;
  double intensity_ = 0.5;  // how power-hungry the kernels are per unit of utilisation
  int64_t dip_steps_left_ = 0;
  double mem_target_mib_ = 0;

  // Continuous state.
  double ambient_c_;
  double util_ = 0;
  double mem_copy_util_ = 0;
  double mem_used_mib_ = 0;
  double power_w_ = 70;  // idle draw until the first step
  double gpu_temp_c_;
  double mem_temp_c_;
  double sm_clock_mhz_ = 345;
  int64_t clock_reasons_ = 0x1;  // idle until the first step
  double pcie_tx_bps_ = 0, pcie_rx_bps_ = 0;
  double nvlink_tx_bps_ = 0, nvlink_rx_bps_ = 0;

  // Counters (only grow, but for Reset()).
  double energy_mj_;
  int64_t power_violation_ns_ = 0;
  int64_t thermal_violation_ns_ = 0;
  int64_t pcie_replays_;
  int64_t ecc_sbe_volatile_ = 0;
  int64_t ecc_sbe_aggregate_;
  int64_t correctable_remapped_rows_;
};

}  // namespace vigil
