// The simulated backend (`--backend sim`): N simulated H100s with realistic, deterministic
// telemetry, for development, tests, demos and CI. Also lets tests and drills mark a GPU lost
// and raise XIDs the way a real driver would.
// A reset (ResetGpu) clears what was simulated on the GPU — lost, compute processes — and takes
// its volatile ECC and energy counters back to zero, as a real reset does.
// Thread-safety: Read() from the engine's sampling thread; everything else from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/sim_gpu.h"

namespace vigil {

// A compute process the simulated node runs (--sim-process), as a pod's workload: on a GPU or one
// of its MIG GPU instances, from `start` to `end` after the engine's first read (sim time: the
// engine's clock as its reads give it), with constant memory and SM share (nullopt on an
// instance, where NVML samples none).
struct SimWorkload {
  uint32_t gpu = 0;
  GpuProcess process;
  absl::Duration start = absl::ZeroDuration();
  absl::Duration end = absl::InfiniteDuration();
};

// GPU[/GI]:PID:MEMORY_MIB[:SM_PERCENT][@START[-END]], e.g. "2:4001:3072:30@10s-70s" (a 3 GiB
// process using 30% of GPU 2's SMs from 10 s to 70 s) or "0/3:5001:2048" (on GPU instance 3, from
// the start, for good). InvalidArgument, saying the form, for anything else.
absl::StatusOr<SimWorkload> ParseSimWorkload(std::string_view text);

struct SimOptions {
  uint32_t gpu_count = 8;
  uint64_t seed = 1;
  std::string driver_version = "580.82.07";
  // GPUs in MIG mode and their instances (--mig); the others whole.
  std::vector<MigLayout> mig;
  // SetMig tells the engine at once, as a current driver's MIG-change event does; false: an older
  // driver, whose reconfigurations only the engine's periodic poll finds.
  bool mig_change_events = true;
  // Processes that start and end (--sim-process), besides SetProcesses'.
  std::vector<SimWorkload> workloads;
};

class SimBackend : public Backend {
 public:
  static constexpr uint32_t kMaxGpus = 64;

  // InvalidArgument when gpu_count is 0 or above kMaxGpus, for a MIG layout of a GPU that does
  // not exist, given twice, or that the GPU could not hold, or for a workload on a GPU or GPU
  // instance that does not exist or a pid given twice on one GPU.
  static absl::StatusOr<std::unique_ptr<SimBackend>> Create(const SimOptions& options);

  std::string_view name() const override { return "sim"; }
  const std::vector<GpuIdentity>& gpus() const override { return identities_; }
  absl::Status Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                    absl::Span<FieldValue> out) override;
  void StartEvents(EventSink* sink) override;
  void StopEvents() override;
  absl::StatusOr<std::vector<GpuProcess>> ReadProcesses(uint32_t gpu) override;
  absl::StatusOr<std::string> ResetGpu(uint32_t gpu) override;
  absl::StatusOr<MigState> ReadMig(uint32_t gpu) override;
  bool TakeMigChangeNotice() override;
  absl::Status ReadInstance(uint32_t gpu, const MigInstance& instance,
                            absl::Span<const FieldId> fields, absl::Time now,
                            absl::Span<FieldValue> out) override;

  // An operator's MIG change while the engine runs (`nvidia-smi -mig 0|1`, `mig -dci -dgi` then
  // `-cgi`): MIG off with no profiles, else the instances of `profiles`, placed as --mig places
  // them (new MIG UUIDs). InvalidArgument, with nothing changed, for a layout that does not fit.
  absl::Status SetMig(uint32_t gpu, bool mode, const std::vector<std::string>& profiles);

  // A lost GPU fails every read with kUnavailable, as a GPU that fell off the bus does.
  void SetGpuLost(uint32_t gpu, bool lost);
  // Delivers an XID to the event sink (if started), as the driver would, on the caller's thread
  // and without this backend's lock (StopEvents waits for the delivery to end, so the sink must
  // not call StopEvents from OnXid).
  void RaiseXid(uint32_t gpu, uint32_t xid, absl::Time time);
  // Compute processes simulated on a GPU (a reset ends them, and is refused while there are any);
  // ReadProcesses adds the workloads running at the GPU's last read.
  void SetProcesses(uint32_t gpu, std::vector<GpuProcess> processes);
  // Makes GPU `gpu`'s process lists fail with `error` while its fields still answer (OK: they
  // answer again), as NVML's process list can be refused alone (NO_PERMISSION on a GPU in MIG
  // mode for an unprivileged caller).
  void FailProcessLists(uint32_t gpu, absl::Status error);
  // Resets done, for tests.
  int resets() const;

 private:
  explicit SimBackend(const SimOptions& options);
  // The workloads running on `gpu` at its last read: all of them, or those on GPU instance
  // `instance` (-1: the whole GPU's).
  std::vector<const SimWorkload*> RunningWorkloads(
      uint32_t gpu, std::optional<int32_t> instance = std::nullopt) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Makes the values read in `out` hold the `running` workloads: used memory at least theirs
  // (`model_fb_used`: the model's own; what they add is taken from the free memory), utilisation
  // at least their SM shares' sum (capped at 100). Fields not read, and errors, are left alone.
  static void AtLeastTheWorkloads(const std::vector<const SimWorkload*>& running,
                                  const FieldValue& model_fb_used, absl::Span<const FieldId> fields,
                                  absl::Span<FieldValue> out);

  std::vector<GpuIdentity> identities_;  // immutable after construction
  mutable absl::Mutex mutex_;
  std::vector<SimGpu> models_ ABSL_GUARDED_BY(mutex_);
  std::vector<bool> lost_ ABSL_GUARDED_BY(mutex_);
  std::vector<MigState> mig_ ABSL_GUARDED_BY(mutex_);  // now (identities_: as discovered)
  uint32_t mig_changes_ ABSL_GUARDED_BY(mutex_) = 0;   // seeds the UUIDs of new instances
  const bool mig_change_events_;
  bool mig_change_noticed_ ABSL_GUARDED_BY(mutex_) = false;  // since TakeMigChangeNotice
  std::vector<std::vector<GpuProcess>> processes_ ABSL_GUARDED_BY(mutex_);
  std::vector<absl::Status> process_list_errors_ ABSL_GUARDED_BY(mutex_);
  const std::vector<SimWorkload> workloads_;
  // The first read's time (the workloads' zero), and each GPU's last read's.
  absl::Time first_read_ ABSL_GUARDED_BY(mutex_) = absl::InfiniteFuture();
  std::vector<absl::Time> last_read_ ABSL_GUARDED_BY(mutex_);
  int resets_ ABSL_GUARDED_BY(mutex_) = 0;
  bool NoDeliveryInProgress() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return deliveries_in_progress_ == 0;
  }

  EventSink* sink_ ABSL_GUARDED_BY(mutex_) = nullptr;
  // RaiseXid calls delivering to sink_ without the lock (StopEvents waits for none).
  int deliveries_in_progress_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace vigil
