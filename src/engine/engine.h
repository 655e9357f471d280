// The host engine: owns the backend, runs the sampling ticks, keeps the one cache (latest
// snapshot and history) every client reads, and fans ticks out to subscribers.
//
// Threading: RunTick() is called by one thread at a time (the TickLoop, or a test driving a fake
// clock). Everything else is thread-safe and may be called from gRPC's threads: readers never
// wait for a backend read, because the backend is only called from RunTick() and the locks
// taken by readers are held only while copying pointers or history samples.
//
// Lock order (outer first; docs/architecture.md has every path): history_mutex_ > real_mutex_ >
// xid_mutex_ > HealthEvaluator::mutex_ > IncidentStore::mutex_ > InjectionTable::mutex_ >
// latest_mutex_. EventLog::mutex_ and SimBackend::mutex_ are leaves: events are published
// (Fanout::mutex_ > the stream reactors' locks) and XIDs delivered with neither held. RunTick takes
// the engine's own mutexes one at a time; history_mutex_ is held while InjectionTable::Apply()
// runs. The scenario runner's lock is a leaf (never held while calling the engine), and no lock
// here is held across disk I/O.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/fanout.h"
#include "engine/config.h"
#include "engine/events.h"
#include "health/evaluator.h"
#include "health/incident_store.h"
#include "inject/injection.h"
#include "inject/scenario.h"
#include "inject/scenario_runner.h"
#include "sampling/history.h"
#include "sampling/schedule.h"
#include "sampling/snapshot.h"

namespace vigil {

using SnapshotPtr = std::shared_ptr<const Snapshot>;
using TickListener = Listener<SnapshotPtr>;

struct EngineOptions {
  std::string node_name;
  EngineConfig config;
  Clock* clock = Clock::Real();  // not owned; outlives the engine
  size_t max_subscribers = 1024;
  // Where FAIL incidents are persisted (health.log); empty: not persisted (tests).
  std::string state_dir;
  std::string boot_id;        // the node's boot id; a change clears persisted incidents
  Env* env = Env::Default();  // the state dir's file system; not owned; outlives the engine
};

// Who this engine is. Fixed at creation.
struct EngineIdentity {
  std::string node_name;
  std::string instance_id;  // random per engine start
  std::string version;
  std::string backend;
  absl::Time start_time;
  absl::Duration tick_interval;
  absl::Duration history_max_age;
};

struct HistoryRequest {
  std::vector<uint32_t> gpus;   // empty: every GPU
  std::vector<FieldId> fields;  // empty: every sampled field
  absl::Time start = absl::InfinitePast();
  absl::Time end = absl::InfiniteFuture();
  size_t max_samples = 0;  // per series; 0: kMaxHistorySamplesPerSeries
  // Also the series of the GPUs' MIG GPU instances (current ones), for per-instance fields.
  bool include_mig_instances = false;
};

// What a GPU reset did (Engine::ResetGpu).
struct GpuResetResult {
  uint32_t gpu = 0;
  std::string uuid;
  std::string output;  // what the backend's reset printed
  absl::Duration took;
  std::vector<std::string> injections_cleared;
};

struct HistorySeries {
  uint32_t gpu = 0;
  std::optional<uint32_t> gpu_instance;  // a MIG GPU instance's series
  FieldId field = 0;
  std::vector<HistorySample> samples;
  bool truncated = false;
};

// Limits that keep one request from costing the engine unbounded memory or time.
inline constexpr size_t kMaxRequestGpus = 1024;
inline constexpr size_t kMaxRequestFields = 4096;
inline constexpr size_t kMaxHistorySamplesPerSeries = 100'000;
inline constexpr size_t kMaxHistoryResponseSamples = 500'000;

// NVML's event and the kernel log's line for one XID arrive within milliseconds of each other;
// the same code on the same GPU from the other source within this window is that XID again.
inline constexpr absl::Duration kXidMergeWindow = absl::Seconds(10);
// NVML's "unknown XID" (kUnknownXid) waits this long for the kernel log's line, which names the
// real code of the same event: one XID, under its real code. Without such a line it is applied
// as XID 999 at the first tick after.
inline constexpr absl::Duration kUnknownXidHold = absl::Seconds(2);

// How often the engine asks the backend for every GPU's MIG state (an operator's
// `nvidia-smi mig -cgi` shows within this).
inline constexpr absl::Duration kMigPollInterval = absl::Seconds(5);

// Counters for the engine's own health; read with relaxed ordering.
struct EngineStats {
  std::atomic<uint64_t> ticks{0};
  std::atomic<uint64_t> gpu_read_failures{0};      // GPU reads that failed as a whole
  std::atomic<uint64_t> gpu_read_timeouts{0};      // ... of which the driver did not answer in time
  std::atomic<uint64_t> process_read_failures{0};  // GPU process lists that could not be read
  std::atomic<uint64_t> xid_events{0};
  std::atomic<uint64_t> xid_duplicates{0};  // a real XID from the second source, not counted
  std::atomic<uint64_t> last_tick_duration_ns{0};
};

class Engine : public EventSink, private ScenarioTarget {
 public:
  // Fails when the backend has no GPU.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(EngineOptions options,
                                                        std::unique_ptr<Backend> backend);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineIdentity& identity() const { return identity_; }
  const EngineConfig& config() const { return options_.config; }
  // The clock the engine's ticks and events are stamped with (and its loops wait on).
  Clock* clock() const { return options_.clock; }
  // The GPUs as discovered; their MIG layout now is Mig()'s, not GpuIdentity::mig.
  const std::vector<GpuIdentity>& gpus() const { return backend_->gpus(); }
  // The MIG layout of the latest tick (as discovered before the first); never null.
  std::shared_ptr<const MigTable> Mig() const { return Latest()->mig; }
  const FieldLayout& layout() const { return *layout_; }
  // The sampling interval of field_index, as scheduled.
  absl::Duration interval(size_t field_index) const { return intervals_[field_index]; }
  const EngineStats& stats() const { return stats_; }
  // stats() as plain numbers, as snapshots and EngineInfo carry them.
  Snapshot::Counters Counters() const;
  // Counters kept outside the engine (the kernel log's reader, which app composes with it):
  // `fill` adds them to every Counters(). Set before the first tick; `fill` runs on the tick
  // thread and on gRPC threads, so it reads only thread-safe state (atomics).
  void SetExternalCounters(std::function<void(Snapshot::Counters*)> fill) {
    external_counters_ = std::move(fill);
  }
  size_t subscriber_queue_depth() const { return options_.config.subscriber_queue_depth; }
  // A source of findings beside the GPUs' fields (network/'s NIC ports, composed by app): judged
  // at every tick, on the tick thread with no engine lock held, and handed to the verdict of the
  // same tick. Every GPU's verdict lists its system from then on. Before the first tick.
  // The clears a previous run persisted of its system are handed to it (HealthSource::Cleared).
  void AddHealthSource(std::unique_ptr<HealthSource> source);
  // Whether the incident `key` of `gpu` (nullopt: the node's) already counts the kernel log's
  // record at `position` (HealthEvaluator::CountsRecord): a source's check of what a restart
  // reads again. Thread-safe.
  bool HealthCountsRecord(std::optional<uint32_t> gpu, const std::string& key,
                          const LogPosition& position) const;
  // The NIC ports the sources read (discovery). Thread-safe.
  std::vector<NicPortEntity> NicPorts() const;

  // The latest snapshot; never null (seq 0 with kNoData values before the first tick).
  std::shared_ptr<const Snapshot> Latest() const;

  // Checks a client's GPU list (InvalidArgument naming the bad index) and resolves its field
  // list to field indexes (InvalidArgument naming the unknown field). Empty means all.
  absl::StatusOr<std::vector<uint32_t>> ResolveGpus(const std::vector<uint32_t>& gpus) const;
  absl::StatusOr<std::vector<size_t>> ResolveFields(const std::vector<FieldId>& fields) const;

  // Samples in the requested range; InvalidArgument for bad GPUs, fields, ranges or a response
  // over kMaxHistoryResponseSamples.
  absl::StatusOr<std::vector<HistorySeries>> History(const HistoryRequest& request) const;

  // Samples every due field of every GPU at clock->Now(), publishes the new snapshot and hands
  // it to every subscriber. One caller at a time.
  void RunTick();

  // EventSink: an XID from the backend. Thread-safe; shows in field 230 from the next tick and
  // on the event stream at once. A kernel-log record its incident already counts (persisted
  // before a restart) is counted as a duplicate and nothing else.
  void OnXid(const XidEvent& event) override;
  // An NVSwitch error: judged by the node's nvswitch health system and recorded as an event
  // (unless, as for an XID, its incident already counts the kernel-log record).
  void OnSxid(const SxidEvent& event) override;

  // --- Fault injection (authorisation is the caller's job: see server/authz.h) ---
  // An injected value replaces (or raises) the reading from the next tick; see injection.h.
  absl::StatusOr<InjectionRecord> InjectField(const FieldInjectionRequest& request,
                                              const Principal& principal) override;
  // Produces the same event a real XID does, flagged injected.
  absl::StatusOr<InjectionRecord> InjectXid(const XidInjectionRequest& request,
                                            const Principal& principal) override;
  // A NIC port's field (its state, physical state, rate or a counter): checked by the source that
  // reads the port (NotFound for a port the node lacks, FailedPrecondition where the engine reads
  // no ports), applied from the next tick as if read, flagged injected, audited.
  absl::StatusOr<InjectionRecord> InjectPort(const PortInjectionRequest& request,
                                             const Principal& principal) override;
  // Validates the whole scenario first, then runs it on the engine's ticks (ScenarioRunner).
  absl::StatusOr<ScenarioRun> RunScenario(std::string_view yaml_text, std::string_view source,
                                          const Principal& principal);
  // Clears an injection ("inj-N"), cancels a scenario ("scn-N", with its injections), or
  // everything (`all`). NotFound for an unknown id. Returns the ids cleared or cancelled.
  absl::StatusOr<std::vector<std::string>> Clear(const std::string& id, bool all,
                                                 const Principal& principal);
  std::vector<InjectionRecord> Injections() const { return injections_.List(); }

  // --- Health ---
  // The verdict of the latest tick (UNKNOWN everywhere before the first).
  std::shared_ptr<const HealthVerdict> Health() const;
  // Clears the incidents of `gpu` (one system or all), sticky FAILs included, or with no GPU
  // those of the node-level systems; audited. What happened before it is not raised again.
  // InvalidArgument for a bad GPU or a system of the other level. The verdict reflects it from
  // the next tick.
  absl::StatusOr<std::vector<Incident>> ClearHealth(std::optional<uint32_t> gpu,
                                                    std::optional<HealthSystem> system,
                                                    const Principal& principal);
  // Resets `gpu` through the backend once no compute process uses it, and ends the injections on
  // it (what they simulated does not survive a reset). Audited: a GPU_RESET event when asked and
  // one when done or failed. The verdict shows the reset from the next tick (the GPU's counters
  // went back). Blocks for as long as the backend's reset takes: call it off gRPC's threads.
  // InvalidArgument for a bad GPU; NotFound when `uuid` is set and is not the GPU's;
  // FailedPrecondition (refused for now, nothing attempted) when compute processes use it (their
  // pids in the message); Aborted while another reset runs; Internal when nothing can say the GPU
  // is idle (lost, the process list unreadable) or the backend's reset was attempted and
  // failed.
  absl::StatusOr<GpuResetResult> ResetGpu(uint32_t gpu, std::string_view uuid,
                                          std::string_view reason, const Principal& principal);
  // Running scenarios and the most recent ended ones.
  std::vector<ScenarioRun> Scenarios() const { return scenarios_.List(); }

  // --- Streams (the service's subscriptions) ---
  // Every published tick, to `listener` until UnsubscribeTicks(); ResourceExhausted past the
  // subscriber limit, FailedPrecondition once the engine is stopping.
  absl::Status SubscribeTicks(std::shared_ptr<TickListener> listener) {
    return fanout_.Add(std::move(listener));
  }
  void UnsubscribeTicks(const TickListener* listener) { fanout_.Remove(listener); }
  // Every event from now, after up to `recent` past ones (EventLog::Watch).
  absl::Status WatchEvents(std::shared_ptr<EventListener> listener, size_t recent) {
    return events_.Watch(std::move(listener), recent);
  }
  void UnwatchEvents(const EventListener* listener) { events_.Unwatch(listener); }
  std::vector<EventPtr> RecentEvents(size_t count) const { return events_.Recent(count); }
  // Ends every tick and event stream with `status` (the server shutting down); later
  // subscriptions are refused.
  void StopStreams(const absl::Status& status) {
    fanout_.Stop(status);
    events_.Stop(status);
  }

 private:
  Engine(EngineOptions options, std::unique_ptr<Backend> backend);
  // RunTick's steps, in order, on the tick thread. Expires injections, advances scenarios and
  // applies the held unknown XIDs due at `now`.
  void BeginTick(absl::Time now);
  // Fills due_ (and due_ids_/due_index_: what the backend reads); false (nothing read) while a
  // GPU reset pauses sampling, else marks the reads in flight.
  bool PlanReads(absl::Time now);
  // Reads due_ids_ of every GPU into read_buffer_ and notes how each read went.
  void ReadGpus(absl::Time now);
  // Tick thread: every GPU's compute processes when GPU utilisation is due this tick (the
  // per-process SM share belongs with it), else null (the last lists stay). A GPU whose read
  // failed this tick, or whose list cannot be read, is unknown; each failure is logged once.
  std::shared_ptr<const std::vector<GpuProcessList>> ReadProcesses();
  // The per-instance fields due: all of them after a MIG change, else the due ones.
  void PlanInstanceReads(bool mig_changed);
  // Keeps the real (pre-injection) readings, for validating counter injections.
  void KeepRealValues();
  // The snapshot to publish: `previous`, with the new MIG table (instances that stay keep their
  // values), this tick's seq, time, read status and injection-allowed actions.
  std::shared_ptr<Snapshot> NextSnapshot(const Snapshot& previous,
                                         const std::shared_ptr<const MigTable>& changed_mig,
                                         uint64_t seq, absl::Time now);
  // Stores the tick's values (injections applied) in `next` and the history.
  void StoreTick(Snapshot* next, const std::vector<FieldValue>& last_xid, const MigTable& mig,
                 bool mig_changed);
  // Judges `next`'s health, publishes it and records the health transitions.
  void JudgeAndPublish(std::shared_ptr<Snapshot> next, absl::Time now);
  // Tick thread: records how reading `gpu` went (gpu_read_, counters, one log line per failure
  // and recovery); on a failure, marks its values in read_buffer_ with the failure.
  void NoteGpuRead(uint32_t gpu, const absl::Status& read);

  const EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  EngineIdentity identity_;
  std::shared_ptr<const FieldLayout> layout_;
  std::vector<absl::Duration> intervals_;
  EngineStats stats_;
  Fanout<SnapshotPtr> fanout_;

  // Owned by the tick thread (RunTick).
  SamplingSchedule schedule_;
  uint64_t last_seq_ = 0;
  std::vector<ValueStatus> gpu_read_;       // per GPU, see Snapshot::gpu_read
  std::vector<bool> process_read_failing_;  // per GPU: its process list failed last time
  std::vector<size_t> due_;                 // scratch
  std::vector<FieldId> due_ids_;
  std::vector<size_t> due_index_;
  std::vector<FieldValue> read_buffer_;      // gpu-major: due_ids_.size() values per GPU
  std::vector<absl::Status> read_statuses_;  // per GPU, of the latest ReadAll
  // MIG (tick thread): when the layout was last read; per GPU, whether reading it fails (said
  // once per failure); the per-instance fields due this tick (ids, and k in instance_fields_)
  // and what was read, row-major, with each row's read status.
  absl::Time last_mig_poll_ = absl::InfinitePast();
  std::vector<bool> mig_read_failing_;
  std::vector<FieldId> due_instance_ids_;
  std::vector<size_t> due_instance_k_;
  std::vector<FieldValue> instance_buffer_;
  std::vector<absl::Status> instance_statuses_;
  // Immutable after construction: the per-instance fields (layout indexes) and, per layout
  // index, its k among them.
  std::shared_ptr<const std::vector<size_t>> instance_fields_;
  std::vector<std::optional<size_t>> instance_slot_;

  mutable absl::Mutex latest_mutex_;
  std::shared_ptr<const Snapshot> latest_ ABSL_GUARDED_BY(latest_mutex_);

  mutable absl::Mutex history_mutex_ ABSL_ACQUIRED_BEFORE(real_mutex_, latest_mutex_);
  HistoryStore history_ ABSL_GUARDED_BY(history_mutex_);
  // The history of the MIG GPU instances (instance_fields_ wide): one store, so one tick table,
  // whose entities are instances. An instance's slot, by GPU, GPU instance id and MIG UUID; the
  // slot of each row of the latest table; slots whose instance is gone (emptied, for reuse).
  // Set in the constructor (optional only for the order of construction).
  std::optional<HistoryStore> instance_history_ ABSL_GUARDED_BY(history_mutex_);
  std::map<std::string, uint32_t> instance_slots_ ABSL_GUARDED_BY(history_mutex_);
  std::vector<uint32_t> instance_row_slots_ ABSL_GUARDED_BY(history_mutex_);
  std::vector<uint32_t> free_instance_slots_ ABSL_GUARDED_BY(history_mutex_);

  absl::Mutex xid_mutex_ ABSL_ACQUIRED_BEFORE(latest_mutex_);
  std::vector<FieldValue> last_xid_ ABSL_GUARDED_BY(xid_mutex_);  // per GPU, for field 230
  // Real XIDs of each (GPU, code) that no report of the other source has matched yet, oldest
  // first, within kXidMergeWindow: a report from the other source matches the oldest (a burst
  // seen by both sources counts once per XID, not once per report).
  struct SeenXid {
    absl::Time time;
    XidSource source;
  };
  std::map<std::pair<uint32_t, uint32_t>, std::deque<SeenXid>> unmatched_xids_
      ABSL_GUARDED_BY(xid_mutex_);
  // NVML's unknown XIDs (999) waiting kUnknownXidHold for the kernel log's line, oldest first.
  std::deque<XidEvent> held_unknown_xids_ ABSL_GUARDED_BY(xid_mutex_);

  InjectionTable injections_;
  EventLog events_;
  std::unique_ptr<IncidentStore> incident_store_;  // null without a state dir
  std::unique_ptr<HealthEvaluator> health_;
  // The latest real (pre-injection) reading of each (GPU, field), to validate counter injections.
  mutable absl::Mutex real_mutex_;
  std::vector<FieldValue> real_values_ ABSL_GUARDED_BY(real_mutex_);

  ScenarioRunner scenarios_;
  std::atomic<bool> resetting_{false};  // a ResetGpu() is running (one at a time)
  // While the backend resets a GPU (the nvml backend has NVML released) the tick reads nothing
  // and the values held stay, as DCGM pauses its cache manager: ResetGpu() waits for the tick's
  // reads in flight to end, then pauses them until the reset returns. Never held across I/O.
  absl::Mutex sampling_mutex_;
  bool sampling_paused_ ABSL_GUARDED_BY(sampling_mutex_) = false;
  bool reads_in_flight_ ABSL_GUARDED_BY(sampling_mutex_) = false;
  std::function<void(Snapshot::Counters*)> external_counters_;  // set before the first tick
  // Set before the first tick (and before the kernel log starts), never changed after: read without
  // a lock by the tick (Judge), the kernel log's thread (OnSxid) and gRPC threads (Cleared,
  // CheckPortInjection).
  std::vector<std::unique_ptr<HealthSource>> sources_;

  // Tick thread: reads every GPU's MIG state when kMigPollInterval has passed; the new table
  // when any GPU's changed (logged and recorded as an event), else null.
  std::shared_ptr<const MigTable> PollMig(absl::Time now, const MigTable& current);
  // Tick thread: reads the due per-instance fields of every row of `mig` into instance_buffer_.
  void ReadInstances(const MigTable& mig, absl::Time now);
  // History: gives every instance of `mig` a slot in instance_history_ (keeping the slots of
  // those that stay, emptying those of instances gone) and fills instance_row_slots_.
  void AssignInstanceSlots(const MigTable& mig) ABSL_EXCLUSIVE_LOCKS_REQUIRED(history_mutex_);
  // Opens the incident store and the health evaluator (Create).
  absl::Status StartHealth();
  // Records an event stamped with the current time and seq.
  EventPtr Record(EngineEvent event);
  // What a real and an injected XID both do: count it, show it in field 230 from the next tick,
  // hand it to the health evaluator (`where`: InGpuInstance's words), and record `event` as the
  // XID event (kind, GPU, code, the
  // policy's rule for it, injected flag filled in here).
  // Applies a reported (not merged away) XID: counted, recorded, judged.
  void ApplyReported(const XidEvent& event);
  // Applies the held unknown XIDs no kernel-log line claimed within kUnknownXidHold of `now`.
  void ApplyHeldUnknownXids(absl::Time now);
  // Takes the oldest unmatched kernel-log report of any code on `gpu` within the window of
  // `time` (an NVML 999 for it arrived), or the oldest held 999 (a log line for it arrived).
  bool TakeUnmatchedLogReport(uint32_t gpu, absl::Time time)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(xid_mutex_);
  bool TakeHeldUnknownXid(uint32_t gpu, absl::Time time) ABSL_EXCLUSIVE_LOCKS_REQUIRED(xid_mutex_);
  void ApplyXid(uint32_t gpu, uint32_t xid, absl::Time time, bool injected, std::string where,
                std::optional<LogPosition> log_position, EngineEvent event);
  // ScenarioTarget: what the scenario runner's steps act on.
  std::vector<std::string> ClearScenarioInjections(const std::string& scenario_id,
                                                   const Principal& who,
                                                   std::string_view why) override;
  std::vector<std::string> ClearFieldInjection(uint32_t gpu, FieldId field, const Principal& who,
                                               std::string_view why) override;
  std::vector<std::string> ClearPortInjection(const std::string& port, const std::string& field,
                                              const Principal& who, std::string_view why) override;
  // Whether a port injection can apply (InjectPort's checks; a scenario's port steps too).
  absl::Status CheckPortInjection(const PortInjectionRequest& request) const;
  // The active port injections, as the sources take them.
  std::vector<PortFieldInjection> PortInjections() const;
  void AuditScenario(ScenarioTarget::Audit what, const Principal& who,
                     std::string message) override;
  // Audits an injection that started, and the one it superseded (if any).
  void RecordStarted(const InjectionRecord& record,
                     const std::optional<InjectionRecord>& superseded, const Principal& principal);
  // Audits each cleared injection; returns their ids.
  std::vector<std::string> RecordCleared(const std::vector<InjectionRecord>& cleared,
                                         const Principal& who, std::string_view why);
};

}  // namespace vigil
