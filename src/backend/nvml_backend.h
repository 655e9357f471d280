// The nvml backend (`--backend nvml`): real GPUs through the NVIDIA driver's libnvidia-ml, loaded
// at run time. Maps every catalogue field NVML can provide onto NVML calls (the batched
// field-value query where it covers a field, GPM on Hopper and newer for the profiling ratios),
// turns NVML's per-call errors into per-field statuses and a lost GPU into a whole-GPU failure,
// and delivers XIDs from NVML's event API on a thread of its own. A GPU reset runs the configured
// command (NvmlResetOptions) with NVML released — the driver refuses a reset while any process
// holds it — and then initialises NVML again, opens every GPU again and registers the XID events
// anew (ResetGpu).
//
// Thread-safety: Read() may run concurrently for different GPUs (each GPU's scratch state is its
// own) but never twice at once for the same GPU. Every call into NVML but the event thread's is
// counted in flight under `driver_mutex_`; ResetGpu() waits for none to be in flight and stops the
// event thread before it releases NVML, and calls that arrive while it is released fail
// (Unavailable) rather than touch a shut-down library. StartEvents()/StopEvents() and the reset's
// restart of the event thread are serialised by `events_control_mutex_`. NVML itself is
// thread-safe. A call that hangs in the driver hangs the caller: bound it with DeadlineBackend.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/nvml_loader.h"
#include "common/clock.h"

namespace vigil {

// How the nvml backend resets a GPU: a command, split on blanks, with {uuid}, {index} and
// {pci_bus_id} replaced by the GPU's. The driver refuses a reset while anything holds the GPU
// (persistence mode, Fabric Manager, another monitor): a site's own script can stop those first.
struct NvmlResetOptions {
  std::string command = "nvidia-smi --gpu-reset -i {uuid}";
  absl::Duration limit = absl::Minutes(2);
};

// Checks a reset command without running it (InvalidArgument as ExpandCommand says).
absl::Status ValidateResetCommand(const std::string& command);

class NvmlBackend : public Backend {
 public:
  // Discovers the GPUs of an initialised NVML. A GPU NVML cannot open is kept (so a GPU that
  // fell off the bus before the engine started is reported, not hidden) and reads as lost, but
  // for one this process may not open (NO_PERMISSION: a container's cgroup hides it), which is
  // left out as DCGM leaves it out. FailedPrecondition when no GPU is left.
  // `clock` (not owned, outlives the backend) timestamps XIDs.
  static absl::StatusOr<std::unique_ptr<NvmlBackend>> Create(std::unique_ptr<NvmlLibrary> library,
                                                             Clock* clock = Clock::Real(),
                                                             NvmlResetOptions reset = {});
  ~NvmlBackend() override;

  // How often a GPU that cannot be opened is tried again (on its reads).
  static constexpr absl::Duration kReopenInterval = absl::Seconds(30);

  std::string_view name() const override { return "nvml"; }
  const std::vector<GpuIdentity>& gpus() const override { return identities_; }
  absl::Status Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                    absl::Span<FieldValue> out) override;
  void StartEvents(EventSink* sink) override;
  void StopEvents() override;
  absl::StatusOr<std::vector<GpuProcess>> ReadProcesses(uint32_t gpu) override;
  absl::StatusOr<std::string> ResetGpu(uint32_t gpu) override;
  // MIG through NVML: the mode, then each MIG device handle with its GPU and compute instance
  // ids, UUID, profile (from the MIG device's name, "… MIG 1g.10gb", as the device plugin reads
  // it), memory and placement. A driver or GPU without MIG: MIG off. Instances are read through
  // their MIG device handles (framebuffer) and nvmlGpmMigSampleGet (the profiling ratios).
  absl::StatusOr<MigState> ReadMig(uint32_t gpu) override;
  // True once after NVML's MIG-change event for any GPU (registered where the driver offers it,
  // as DCGM does); the engine then reads the MIG layouts at its next tick instead of waiting for
  // its periodic poll.
  bool TakeMigChangeNotice() override {
    return mig_change_noticed_.exchange(false, std::memory_order_acq_rel);
  }
  absl::Status ReadInstance(uint32_t gpu, const MigInstance& instance,
                            absl::Span<const FieldId> fields, absl::Time now,
                            absl::Span<FieldValue> out) override;

 private:
  // What one GPU needs across reads; touched only by the thread reading that GPU.
  struct GpuState {
    // Null: NVML could not open it (at start, or again after a reset). Written by the GPU's
    // reading thread (reopened) or the reset with the event thread stopped; read by the event
    // thread too, hence atomic.
    std::atomic<nvml::Device> device = nullptr;
    unsigned int nvml_index = 0;  // NVML's index of the GPU (the engine's skips hidden GPUs)
    std::string open_error;
    // While it cannot be opened: when to try again (kReopenInterval apart), and whether a GPU
    // unknown at start has been said to open now.
    absl::Time next_open = absl::InfinitePast();
    bool said_opens_now = false;
    bool gpm_supported = false;
    nvml::GpmSample gpm_samples[2] = {};
    int gpm_current = 0;  // the sample the next read fills
    bool gpm_have_previous = false;
    std::unique_ptr<nvml::GpmMetricsGet> gpm_request;
    std::vector<nvml::FieldValue> field_values;  // scratch for the batched query
    // The previous NVLink data total (KiB; all links for 449, one for 440-445) and its NVML
    // timestamp (µs): those fields are the rate between two samples, as DCGM computes it.
    std::map<FieldId, std::pair<int64_t, int64_t>> nvlink_previous;  // 449 and 440-445
    absl::flat_hash_set<uint64_t> logged;  // (field << 32 | NVML error) already logged
    // A MIG GPU instance's state: `device` is its MIG device handle, and its GPM samples come
    // from nvmlGpmMigSampleGet on `gpm_parent` for GPU instance `gpm_gpu_instance`.
    nvml::Device gpm_parent = nullptr;
    unsigned int gpm_gpu_instance = 0;
    std::string mig_uuid;  // the MIG device's UUID when this state was made
    // The GPU's MIG GPU instances as ReadMig last found them, by GPU instance id: written by
    // ReadMig, read by the instance reads and ReadProcesses, all on the GPU's reading thread
    // (DeadlineBackend's worker for it; the reset worker only while sampling is paused).
    std::map<uint32_t, std::unique_ptr<GpuState>> mig_instances;
  };
  class Reader;

  NvmlBackend(std::unique_ptr<NvmlLibrary> library, Clock* clock, NvmlResetOptions reset);
  // Allocates GPM samples for `state` (its device's, or with gpm_parent set an instance's) when
  // the driver and GPU support GPM; FreeGpm releases them, with those of its instances.
  void AllocateGpm(GpuState* state, bool gpu_supports_gpm) const;
  void FreeGpm(GpuState* state) const;
  absl::StatusOr<MigState> ReadMigUnguarded(uint32_t gpu);
  // NVML's handle of the GPU with `uuid`, trying its last index first (indexes may move across a
  // reset); null when NVML lists none. Sets *nvml_index.
  nvml::Device FindByUuid(const std::string& uuid, unsigned int* nvml_index) const;
  // Opens, at most every kReopenInterval, a GPU that could not be opened: one known by UUID (lost
  // to a reset) is monitored again, GPM, MIG and its XID registration made anew; one never opened
  // (its identity unknown since start) cannot be taken on while running: its error says to
  // restart the engine. True when it is open now. On the GPU's reading thread.
  bool TryReopen(uint32_t gpu);
  // The compute processes NVML lists for one device handle (a GPU's or a MIG device's), with
  // their memory and MIG instance.
  absl::StatusOr<std::vector<GpuProcess>> ProcessesOf(nvml::Device device);
  // Each process's SM utilisation in its latest sample on `device` (a whole GPU's handle): empty
  // where the driver has none, nullopt where it cannot say (no such query, not supported).
  std::optional<std::map<uint32_t, uint32_t>> SmUtilOf(nvml::Device device);
  // The event thread's loop on `set` (`registered` GPUs in it); owns and frees the set.
  void RunEvents(nvml::EventSet set, size_t registered);
  // A new event set with every GPU that registers for XID events (a GPU whose registration
  // answers UNKNOWN is left out, on a fresh set: the driver leaves that set undefined), and for
  // MIG-change events where the driver offers them; null when none registers. `log`: say why a
  // GPU is left out (at start; not when rebuilt).
  nvml::EventSet MakeEventSet(bool log, size_t* registered) ABSL_LOCKS_EXCLUDED(event_mutex_);
  // On the event thread: frees `*set` and makes a new one (the registrations of a GPU whose MIG
  // layout changed are stale: DCGM registers again on the driver's MIG-change notice).
  void RemakeEventSet(nvml::EventSet* set, size_t* registered, const std::string& why);
  void StartEventsLocked(EventSink* sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(events_control_mutex_);
  void StopEventsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(events_control_mutex_);
  // Around a reset: ReleaseDriver() waits (bounded) for no NVML call in flight, stops the event
  // thread, frees the GPM samples and shuts NVML down; AttachDriver() initialises it again, opens
  // every GPU again (checked by UUID), allocates GPM, reads the MIG instances and registers the
  // events anew. A failure to attach leaves NVML released: every read then fails, loudly.
  absl::Status ReleaseDriver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(events_control_mutex_);
  absl::Status AttachDriver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(events_control_mutex_);
  // Counts a call into NVML in flight for as long as it lives; ok() is false (and nothing may be
  // called) while NVML is released.
  class DriverUse;
  // The status of a read that NVML answered for the whole GPU: Unavailable for a lost GPU,
  // FailedPrecondition for one that needs a reset (the engine's StatusForGpuFailure maps them).
  absl::Status WholeGpuFailure(nvml::Return code) const;

  const std::unique_ptr<NvmlLibrary> library_;
  const nvml::Api& api_;
  Clock* const clock_;
  const NvmlResetOptions reset_;
  std::vector<GpuIdentity> identities_;  // immutable after Create
  // The bytes of one entry DeviceGetComputeRunningProcesses writes (nvml::ProcessInfoSize);
  // immutable after Create.
  size_t process_info_size_ = sizeof(nvml::ProcessInfo);
  std::vector<std::unique_ptr<GpuState>> gpu_state_;  // one per GPU; see GpuState
  std::thread event_thread_;  // owned by StartEvents/StopEvents, under events_control_mutex_
  absl::Mutex events_control_mutex_ ABSL_ACQUIRED_BEFORE(driver_mutex_);
  absl::Mutex driver_mutex_ ABSL_ACQUIRED_BEFORE(event_mutex_);
  bool driver_released_ ABSL_GUARDED_BY(driver_mutex_) = false;  // NVML shut down for a reset
  std::string release_error_ ABSL_GUARDED_BY(driver_mutex_);     // why it stays released, if so
  int calls_in_flight_ ABSL_GUARDED_BY(driver_mutex_) = 0;
  absl::Mutex event_mutex_;
  bool events_stopping_ ABSL_GUARDED_BY(event_mutex_) = false;
  // ReadMig saw a GPU's MIG layout change on a GPU that gives no MIG-change events: the event
  // thread makes its set anew at its next wake (within one wait), off the reading worker.
  bool rebuild_events_ ABSL_GUARDED_BY(event_mutex_) = false;
  // Per GPU: registered for MIG-change events in the event thread's current set.
  std::vector<bool> mig_events_ ABSL_GUARDED_BY(event_mutex_);
  std::atomic<bool> mig_change_noticed_{false};  // see TakeMigChangeNotice
  // Set before the event thread starts (under events_control_mutex_), read by it.
  EventSink* sink_ = nullptr;
  // The sink to deliver to again once a reset has NVML back (null: events were not running).
  EventSink* resume_events_ ABSL_GUARDED_BY(events_control_mutex_) = nullptr;
};

}  // namespace vigil
