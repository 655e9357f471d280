// The health engine: evaluates every GPU's health once per tick, for every client, from the same
// snapshot the tick publishes — so the verdict carries the tick's (instance_id, seq), and a fault
// shows in the verdict at the first tick that carries it.
//
// Per GPU and system (pcie, memory, inforom, thermal, power, nvlink, driver; network where a
// source reads the NIC ports) a status: PASS, WARN, FAIL, or UNKNOWN when the data behind the
// system is missing or stale (never PASS then). A system judged by a source (health/source.h) takes
// that source's findings, reported each tick, through the same incidents as the DCGM rules; no
// source's system is named here. Node-level systems (nvswitch: the NVSwitches' SXids, from the
// kernel log's source) are judged once for the node, where the engine has their source (listed
// then; UNKNOWN while the source says it cannot see). Findings are incidents (DCGM_FR_* codes, a
// message an on-call engineer can act on, first and last seen, a count): a repeat updates the
// incident instead of adding another. WARN incidents expire a window after they were last seen;
// FAIL incidents are sticky and persisted (IncidentStore) until their clear condition: a GPU reset
// seen (volatile ECC counters or the energy counter going back, which only a reset or driver reload
// does), a reboot (boot id changed), or an operator's `vigil health clear`. An XID or SXid that
// happened before the last clear of its GPU (or the node) and system is not raised again — a kernel
// log replayed after its replay state was lost brings old lines back.
//
// Threading: Evaluate() on the tick thread; RecordXid() from any thread (the backend's event
// thread, the kernel log's, gRPC threads injecting); Clear() and Latest() from gRPC
// threads. One mutex guards the incident table; evaluation is short (see bench: well under 20 us
// for 8 GPUs).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/backend.h"
#include "common/principal.h"
#include "health/policy.h"
#include "health/source.h"
#include "sampling/snapshot.h"

namespace vigil {

struct Incident {
  uint32_t gpu = 0;         // the GPU's index; 0 and unused for a node-level incident
  std::string uuid;         // the GPU's; "" for a node-level incident
  bool node_level = false;  // about the node (its NVSwitches), not one GPU
  HealthSystem system = HealthSystem::kDriver;
  HealthStatus status = HealthStatus::kWarn;
  std::string key;      // identity for de-duplication: "memory.volatile_dbe", "xid.79", ...
  std::string code;     // DCGM_FR_*
  std::string message;  // what happened, with the numbers
  std::string action;   // what to do
  RecommendedAction recommended = RecommendedAction::kInspect;  // the same, machine-readable
  absl::Time first_seen;
  absl::Time last_seen;
  uint64_t count = 1;     // occurrences (condition onsets, XIDs)
  bool injected = false;  // raised from injected data (a drill)
  // Injected, by a drill that lets automatic actions (the taint) follow; a real incident acts
  // anyway.
  bool actions_allowed = false;
  // WARN incidents go away this long after they were last seen; FAIL incidents never expire,
  // but for those not `sticky` (a state that ends without a reset: RaiseWhileItHolds).
  absl::Duration expire_after = absl::Seconds(60);
  bool sticky = true;
  // The latest kernel-log record counted in it (an XID or SXid read from the log): that record
  // and the earlier ones of the same log are already counted when a restart reads the log again.
  std::optional<LogPosition> log_position;
};

struct SystemHealth {
  HealthSystem system = HealthSystem::kPcie;
  HealthStatus status = HealthStatus::kPass;
  std::string unknown_reason;  // why UNKNOWN
  std::vector<Incident> incidents;
};

struct GpuHealth {
  uint32_t gpu = 0;
  std::string uuid;
  HealthStatus status = HealthStatus::kPass;
  // In kGpuHealthSystems order; a system judged by a source only where the engine has it (or a
  // FAIL of it restored from before a restart is still there).
  std::vector<SystemHealth> systems;
};

struct HealthVerdict {
  uint64_t seq = 0;
  absl::Time time;
  HealthStatus overall = HealthStatus::kUnknown;  // of the GPUs and the node-level systems
  std::vector<GpuHealth> gpus;
  // In kNodeHealthSystems order, those whose source the engine has (or that hold a FAIL restored
  // from before a restart).
  std::vector<SystemHealth> node_systems;
};

struct HealthTransition {
  uint32_t gpu = 0;         // unused when node_level
  std::string uuid;         // "" when node_level
  bool node_level = false;  // a node-level system changed
  HealthSystem system = HealthSystem::kPcie;
  HealthStatus from = HealthStatus::kUnknown;
  HealthStatus to = HealthStatus::kUnknown;
  std::string summary;  // the incidents (or the unknown reason) behind the new status
  bool injected = false;
};

// An operator's `vigil health clear` of a GPU's (or the node's) systems: what happened before it
// is not raised again.
struct OperatorClear {
  std::string uuid;                    // the GPU's; "" for the node-level systems
  std::optional<HealthSystem> system;  // nullopt: every system
  absl::Time time;
};

// Receives the changes that must survive a restart: FAIL incidents and operator clears.
// Implemented by IncidentStore; tests use fakes.
class IncidentSink {
 public:
  virtual ~IncidentSink() = default;
  virtual void Raised(const Incident& incident) = 0;  // new or updated
  virtual void Cleared(const Incident& incident, std::string_view reason) = 0;
  virtual void OperatorCleared(const OperatorClear& clear) = 0;
};

// What a previous run left in the state dir.
struct RestoredHealth {
  std::vector<Incident> incidents;  // FAIL incidents, with the GPU index of this run
  std::vector<OperatorClear> clears;
};

class HealthEvaluator {
 public:
  // `intervals[i]` is the sampling interval of field index i (for staleness). `sink` may be null
  // and must outlive the evaluator. `restored` is what the state dir held (a clear of a GPU
  // not present is ignored).
  HealthEvaluator(HealthPolicy policy, std::shared_ptr<const FieldLayout> layout,
                  std::vector<GpuIdentity> gpus, std::vector<absl::Duration> intervals,
                  IncidentSink* sink, RestoredHealth restored);

  // A source will report `system` (one judged from a source): every GPU's verdict (or the node's,
  // for a node-level system) lists it from now on. Before the first Evaluate().
  void AttachSource(HealthSystem system);

  // Tick thread: evaluates `snapshot` at `now` with the sources' `reports` of this tick (a system
  // not reported keeps its previous report's findings); returns the verdict (stamped with the
  // snapshot's seq) and appends what changed to *transitions.
  std::shared_ptr<const HealthVerdict> Evaluate(const Snapshot& snapshot, absl::Time now,
                                                std::vector<HealthTransition>* transitions,
                                                std::vector<SourceReport> reports = {});

  // An XID, to be judged at the next Evaluate(); `where`: the MIG GPU instance it was raised in,
  // as InGpuInstance() words it from the GPU's instances at the time, named in the incident (the
  // verdict stays the GPU's); `log_position`: its kernel-log record, kept by the incident.
  // Thread-safe.
  void RecordXid(uint32_t gpu, uint32_t xid, absl::Time time, bool injected,
                 bool actions_allowed = false, std::string where = "",
                 std::optional<LogPosition> log_position = std::nullopt);
  // Whether the incident `key` of `gpu` (nullopt: of the node) already counts the kernel log's
  // record at `position`: it keeps that record or a later one of the same log, as one restored
  // from before a restart does. Such a record is not to be recorded again. Thread-safe.
  bool CountsRecord(std::optional<uint32_t> gpu, const std::string& key,
                    const LogPosition& position) const;
  // The same for XID `xid` on `gpu`.
  bool CountsXidRecord(uint32_t gpu, uint32_t xid, const LogPosition& position) const;
  // The last operator clear of `system` of `gpu` (nullopt: of the node); InfinitePast if none.
  // Thread-safe.
  absl::Time LastClear(std::optional<uint32_t> gpu, HealthSystem system) const;
  // The kernel log's record of an XID already counted from NVML's report: at the next Evaluate()
  // the incident (if the XID made one) keeps the record, and a FAIL incident is persisted with
  // it, so a restart does not count the XID again from the log. Thread-safe.
  void NoteXidRecord(uint32_t gpu, uint32_t xid, LogPosition position);

  // An operator's clear at `now`: removes the incidents of `gpu` (one system, or all) and
  // remembers the time; returns what was removed. A GPU out of range clears nothing.
  std::vector<Incident> Clear(uint32_t gpu, std::optional<HealthSystem> system,
                              const std::string& reason, absl::Time now);
  // The same for the node-level systems (`system`, if given, is one of them).
  std::vector<Incident> ClearNode(std::optional<HealthSystem> system, const std::string& reason,
                                  absl::Time now);

  // The latest verdict; UNKNOWN for every GPU before the first evaluation.
  std::shared_ptr<const HealthVerdict> Latest() const;
  const HealthPolicy& policy() const { return policy_; }

 private:
  struct CounterWindow {  // (time, value) samples of one cumulative counter within the window
    std::deque<std::pair<absl::Time, int64_t>> samples;
    uint64_t last_seq = 0;
  };
  struct Condition {  // a rule that fired this tick
    HealthSystem system;
    HealthStatus status;
    std::string key, code, message, action;
    bool injected;
    bool actions_allowed = false;
    RecommendedAction recommended = RecommendedAction::kInspect;
    bool sticky = true;  // false: RaiseWhileItHolds
    std::optional<LogPosition> log_position;
    // How long it lasts once it stopped holding (unless a sticky FAIL); nullopt: the window.
    std::optional<absl::Duration> expire_after;
  };
  class GpuRuleContext;
  struct PendingXid {
    uint32_t gpu, xid;
    absl::Time time;
    bool injected, actions_allowed;
    std::string where;
    std::optional<LogPosition> log_position;
    bool counted = false;  // counted already (NVML's report): only its log record is new
  };
  // Incident tables are per "slot": one per GPU (its index), then one for the node.
  size_t node_slot() const { return gpus_.size(); }

  // Field index for a catalogue ID (every rule's input is in the layout).
  size_t Index(FieldId field) const;
  // Adds the new sample (if any) of a counter and returns its increase over the window, or
  // nullopt when there is no usable value. Sets *reset when the counter went backwards.
  std::optional<int64_t> WindowDelta(uint32_t gpu, FieldId field, const Snapshot& snapshot,
                                     absl::Time now, bool* reset, bool* injected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void EvaluateRules(uint32_t gpu, const Snapshot& snapshot, absl::Time now,
                     std::vector<Condition>* conditions, bool* reset_seen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Appends the latest reports' findings about `gpu` as conditions; sets the sources' unknown
  // reasons for it.
  void SourceConditions(uint32_t gpu, std::vector<Condition>* conditions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void EvaluateXids(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Raises the sources' occurrences of this evaluation (each an onset, once).
  void EvaluateOccurrences(const std::vector<std::pair<HealthSystem, SourceFinding>>& occurrences,
                           absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A source's finding as a condition of `system`.
  static Condition ConditionOf(HealthSystem system, const SourceFinding& finding);
  // Why a system from a source cannot be judged for `unknown_index` (a GPU, or 0: the node) now.
  std::string SourceUnknown(HealthSystem system, size_t unknown_index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether a finding of `time` precedes the last operator clear of (slot, system); logs it.
  bool ClearedSince(size_t slot, HealthSystem system, absl::Time time, std::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::vector<Incident> ClearSlot(size_t slot, std::optional<HealthSystem> system,
                                  const std::string& reason, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether the incident `key` of `slot` keeps `position` or a later record of the same log.
  bool CountsRecordIn(size_t slot, const std::string& key, const LogPosition& position) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives an XID's incident the kernel-log record of an XID counted from NVML; persists it.
  void KeepRecord(const PendingXid& xid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Why (GPU, system) cannot be judged now, or "" when its inputs are fresh.
  std::string UnknownReason(uint32_t gpu, HealthSystem system, const Snapshot& snapshot,
                            absl::Time now) const;
  // Records a finding in a slot: `onset` counts a new occurrence (an XID, or a condition that
  // was not holding at the previous evaluation).
  void Upsert(size_t slot, const Condition& condition, absl::Time now, bool onset,
              absl::Duration expire_after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::shared_ptr<const HealthVerdict> BuildVerdict(uint64_t seq, absl::Time time) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // One system's incidents from a slot, and its status with `unknown_reason`.
  SystemHealth SystemHealthOf(size_t slot, HealthSystem which, std::string unknown_reason) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Appends to *transitions what changed from `before` to `now` in one system.
  static void Compare(const SystemHealth& before, const SystemHealth& now, size_t slot,
                      const std::string& uuid, bool node_level,
                      std::vector<HealthTransition>* transitions);

  const HealthPolicy policy_;
  const std::shared_ptr<const FieldLayout> layout_;
  const std::vector<GpuIdentity> gpus_;
  const std::vector<absl::Duration> intervals_;
  IncidentSink* const sink_;
  // Precomputed per field index: the age past which a value is stale.
  std::vector<absl::Duration> stale_after_;
  // Field IDs -> layout index, for the fields the rules read (a flat table; IDs are < 2048).
  std::vector<int32_t> index_of_;

  mutable absl::Mutex mutex_;
  // Per slot: incidents by key.
  std::vector<std::map<std::string, Incident>> incidents_ ABSL_GUARDED_BY(mutex_);
  // Per slot: keys of condition incidents that held at the previous evaluation.
  std::vector<std::map<std::string, bool>> active_ ABSL_GUARDED_BY(mutex_);
  // Per slot and system (kHealthSystems index): the last operator clear.
  std::vector<std::vector<absl::Time>> cleared_at_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::map<FieldId, CounterWindow>> counters_ ABSL_GUARDED_BY(mutex_);
  // Per GPU and XID code: recent occurrence times (for count rules).
  std::vector<std::map<uint32_t, std::deque<absl::Time>>> xid_times_ ABSL_GUARDED_BY(mutex_);
  std::vector<PendingXid> pending_xids_ ABSL_GUARDED_BY(mutex_);
  // Per GPU and system: why it could not be judged at the last evaluation ("" if it could).
  std::vector<std::vector<std::string>> unknown_ ABSL_GUARDED_BY(mutex_);
  // Per node-level system (kNodeHealthSystems order): the same for the node.
  std::vector<std::string> node_unknown_ ABSL_GUARDED_BY(mutex_);
  // Per system (kHealthSystems index): whether a source reports it, and its latest report.
  std::vector<bool> attached_ ABSL_GUARDED_BY(mutex_);
  std::map<HealthSystem, SourceReport> reports_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const HealthVerdict> latest_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
