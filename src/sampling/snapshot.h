// The engine's view of every (GPU, field) as of one tick: what GetLatestValues serves and what
// every subscriber receives. Snapshots are immutable once published and shared by pointer, so
// one tick fans out to any number of readers without copying.
// Thread-safety: a published Snapshot is read-only and may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "fields/catalogue.h"
#include "fields/gpu_process.h"
#include "fields/mig_entity.h"
#include "fields/nic_port_entity.h"
#include "fields/value.h"

namespace vigil {

struct HealthVerdict;
struct HealthTransition;

// The fields an engine samples, in a fixed order; field_index values index into it.
// Immutable; thread-safe.
class FieldLayout {
 public:
  explicit FieldLayout(std::vector<const FieldInfo*> fields);

  size_t size() const { return fields_.size(); }
  const FieldInfo& field(size_t index) const { return *fields_[index]; }
  std::optional<size_t> IndexOf(FieldId id) const;

 private:
  std::vector<const FieldInfo*> fields_;
  std::unordered_map<FieldId, size_t> index_;
};

// The MIG layout of every GPU at one tick: which GPU instances exist, each an entity of its own
// with a row of per-instance values (Snapshot::instance_values). Immutable; the snapshots of the
// ticks between two layout changes share one.
struct MigTable {
  uint64_t generation = 0;     // grows with every change of any GPU's MIG state
  std::vector<MigState> gpus;  // per GPU
  struct Row {
    uint32_t gpu;
    size_t position;  // in gpus[gpu].instances
  };
  std::vector<Row> rows;          // every GPU instance: GPU by GPU, each in placement order
  std::vector<size_t> first_row;  // per GPU: its first row (its rows are contiguous)

  // Builds rows and first_row from `gpus`.
  MigTable(uint64_t generation, std::vector<MigState> gpus);
  const MigInstance& instance(size_t row) const {
    return gpus[rows[row].gpu].instances[rows[row].position];
  }
  // The row of GPU instance `gpu_instance_id` of `gpu`, if it exists.
  std::optional<size_t> RowOf(uint32_t gpu, uint32_t gpu_instance_id) const;
};

struct LatestValue {
  FieldValue value;  // kNoData until the first sample
  uint64_t sample_seq = 0;
  absl::Time sample_time = absl::UnixEpoch();
};

struct Snapshot {
  uint64_t seq = 0;  // 0: before the first tick
  absl::Time time = absl::UnixEpoch();
  uint32_t gpu_count = 0;
  std::shared_ptr<const FieldLayout> layout;
  std::vector<LatestValue> values;  // values[gpu * layout->size() + field_index]
  // Per GPU: kOk, or why the latest read of the GPU failed as a whole (kGpuLost: it does not
  // answer; kTimeout: the driver call hung; ...). Fields not due at that tick keep their last
  // values, so this, not those values, says whether the GPU still answers.
  std::vector<ValueStatus> gpu_read;
  // The engine's counters as of this tick (EngineStats).
  struct Counters {
    uint64_t ticks = 0;
    uint64_t gpu_read_failures = 0;
    uint64_t gpu_read_timeouts = 0;
    uint64_t xid_events = 0;
    // Real XIDs seen by both sources (NVML's events and the kernel log) and counted once.
    uint64_t xid_duplicates = 0;
    // Per GPU and read: compute process lists that could not be read while the GPU's fields
    // could (the per-pod usage of a shared GPU is unknown meanwhile).
    uint64_t process_read_failures = 0;
    // The kernel log (--kmsg): whether it is read, XIDs taken from it, XIDs for a bus id of no
    // GPU, records the ring buffer overwrote before they were read.
    enum class KernelLog { kOff, kReading, kAbsent, kUnreadable } kernel_log = KernelLog::kOff;
    uint64_t kernel_log_xids = 0;
    uint64_t kernel_log_unknown_gpu = 0;
    uint64_t kernel_log_overwritten = 0;
    std::string kernel_log_source;  // "/dev/kmsg", "journal /var/log/journal"
    // Health state persistence (the incident store): records not yet durable, how long the
    // oldest has waited, failed write attempts.
    uint64_t persistence_pending = 0;
    absl::Duration persistence_lag;
    uint64_t persistence_failures = 0;
  } counters;

  // Per GPU: an active injection on it lets automatic actions follow (a drill's choice).
  std::vector<bool> injection_allows_actions;
  bool allows_actions(uint32_t gpu) const {
    return gpu < injection_allows_actions.size() && injection_allows_actions[gpu];
  }

  ValueStatus gpu_read_status(uint32_t gpu) const {
    return gpu < gpu_read.size() ? gpu_read[gpu] : ValueStatus::kOk;
  }
  // Per GPU, its compute processes as last read (when GPU utilisation was due); null before the
  // first read.
  std::shared_ptr<const std::vector<GpuProcessList>> processes;
  // The NIC ports the engine's sources read, as of this tick (null where it reads none).
  std::shared_ptr<const std::vector<NicPortEntity>> nic_ports;
  // The health verdict computed from this snapshot (same seq), and what changed at this tick.
  std::shared_ptr<const HealthVerdict> health;
  std::shared_ptr<const std::vector<HealthTransition>> health_transitions;

  const LatestValue& at(uint32_t gpu, size_t field_index) const {
    return values[gpu * layout->size() + field_index];
  }

  // MIG: the layout as of this tick (never null), the fields sampled per GPU instance (indexes
  // into layout, in layout order: SampledPerMigInstance's) and their latest values, row by row:
  // instance_values[row * instance_fields->size() + k] is field instance_fields[k] of mig row
  // `row`. A field not due at this tick keeps its last value, as for GPUs.
  std::shared_ptr<const MigTable> mig;
  std::shared_ptr<const std::vector<size_t>> instance_fields;
  std::vector<LatestValue> instance_values;
  const LatestValue& instance_at(size_t row, size_t k) const {
    return instance_values[row * instance_fields->size() + k];
  }
};

}  // namespace vigil
