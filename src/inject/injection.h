// Fault injection into the engine: injected values replace (or, on cumulative counters, raise)
// the backend's readings for a while, then real readings resume. Every injected value carries the
// `injected` flag. Works with any backend, because it is applied to readings inside the engine.
//
// Counters stay monotonic for consumers. `add` raises a counter by N on top of the real reading,
// which it keeps following; `value` may not be below the real reading. While an injection is
// active, and after it ends until the real counter catches up, a counter never goes below what was
// last published: the published value is max(candidate, last published), flagged injected as long
// as it differs from the real reading. (Otherwise a cleared injection would look like a counter
// reset to Prometheus and like an error burst to a health rule.)
//
// A new injection on a (GPU, field) that already has one supersedes it.
//
// A NIC port's field (its state, physical state, rate or a counter, by name) is injected the same
// way: the table keeps, audits, expires and clears it with the others, and the engine hands the
// active ones to the network source, which applies them to what it reads (and keeps the port's
// counters monotonic by the same rule). Which ports and fields exist is the source's to say.
//
// Thread-safety: every method is thread-safe. The tick thread calls Expire(), ForcedFields() and
// Apply(); gRPC threads add, clear and list.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/principal.h"
#include "sampling/snapshot.h"

namespace vigil {

enum class InjectionMode { kValue, kAdd, kXid };

struct InjectionRecord {
  std::string id;     // "inj-12"
  uint32_t gpu = 0;   // unused for a NIC port's field
  FieldId field = 0;  // 0 for an XID and a NIC port's field
  // A NIC port's field: the port ("mlx5_3/1") and the field ("state", "link_downed"); "" for a
  // GPU's.
  std::string nic_port;
  std::string port_field;
  uint32_t xid = 0;
  InjectionMode mode = InjectionMode::kValue;
  FieldValue value;  // kValue: the replacement, of the field's type
  int64_t add = 0;   // kAdd: the amount
  Principal principal;
  absl::Time start;
  absl::Time expire;  // == start for an XID (a one-off event)
  std::string scenario_id;
  // A drill that lets automatic actions (the health check's taint) follow this fault; without
  // it the chain is proven up to the decision (see docs/drill.md).
  bool allow_actions = false;

  // "GPU 1 DCGM_FI_DEV_POWER_USAGE = 900 for 5s", "NIC port mlx5_3/1 state = 1 for 1m" and the
  // like, for logs and events.
  std::string Describe() const;
  // The GPU an event about it names: -1 for a NIC port's field (not about one GPU).
  int EventGpu() const { return nic_port.empty() ? static_cast<int>(gpu) : -1; }
};

struct InjectionLimits {
  absl::Duration default_duration = absl::Seconds(60);
  absl::Duration max_duration = absl::Hours(1);
  size_t max_active = 1024;
};

struct FieldInjectionRequest {
  uint32_t gpu = 0;
  FieldId field = 0;
  std::optional<double> value;  // exactly one of value and add
  std::optional<int64_t> add;
  absl::Duration duration = absl::ZeroDuration();  // 0: the default
  std::string scenario_id;
  bool allow_actions = false;  // see InjectionRecord
};

// A NIC port's field; the engine has its source check the port, the field and the value first.
struct PortInjectionRequest {
  std::string port;             // "mlx5_3/1"
  std::string field;            // "state", "phys_state", "rate" or a counter's file name
  std::optional<double> value;  // exactly one of value and add
  std::optional<int64_t> add;
  absl::Duration duration = absl::ZeroDuration();  // 0: the default
  std::string scenario_id;
  bool allow_actions = false;  // see InjectionRecord
};

struct XidInjectionRequest {
  uint32_t gpu = 0;
  uint32_t xid = 0;
  // MIG: the GPU instance the XID is raised in (the engine checks the GPU has it).
  std::optional<uint32_t> gpu_instance;
  std::string scenario_id;
  bool allow_actions = false;  // see InjectionRecord
};

class InjectionTable {
 public:
  InjectionTable(std::shared_ptr<const FieldLayout> layout, uint32_t gpu_count,
                 InjectionLimits limits);

  const InjectionLimits& limits() const { return limits_; }

  // Validates the request (GPU, field, type, duration, counter rules against `real`, the latest
  // real reading) and records it, superseding an injection on the same (GPU, field). Returns the
  // new record and, in *superseded, the one it replaced. InvalidArgument / ResourceExhausted with
  // a message for people.
  absl::StatusOr<InjectionRecord> AddField(const FieldInjectionRequest& request,
                                           const FieldValue& real, const Principal& principal,
                                           absl::Time now,
                                           std::optional<InjectionRecord>* superseded);
  // Records a NIC port field's injection (the duration, the limits and the form of the change
  // checked here; the port, the field and the value by the engine's source), superseding one on
  // the same (port, field).
  absl::StatusOr<InjectionRecord> AddPort(const PortInjectionRequest& request,
                                          const Principal& principal, absl::Time now,
                                          std::optional<InjectionRecord>* superseded);
  // An XID injection's audit record (XIDs are one-off events: nothing stays active).
  absl::StatusOr<InjectionRecord> MakeXid(const XidInjectionRequest& request,
                                          const Principal& principal, absl::Time now);

  // Removes one active injection by id (NotFound otherwise), all of them, or those a scenario
  // made. Returns what was removed.
  absl::StatusOr<InjectionRecord> Clear(const std::string& id);
  std::vector<InjectionRecord> ClearAll();
  std::vector<InjectionRecord> ClearScenario(const std::string& scenario_id);
  std::vector<InjectionRecord> ClearField(uint32_t gpu, FieldId field);
  std::vector<InjectionRecord> ClearPortField(const std::string& port, const std::string& field);
  // Every injection on `gpu`'s fields (a reset ends what they simulated; not its NIC ports').
  std::vector<InjectionRecord> ClearGpu(uint32_t gpu);
  std::vector<InjectionRecord> List() const;
  // Per GPU (0 .. gpu_count-1): whether an active injection on it lets automatic actions follow
  // it (a drill's choice). One pass under the lock.
  std::vector<bool> ActionGpus(uint32_t gpu_count) const;

  // The active NIC port injections, in (port, field) order.
  std::vector<InjectionRecord> PortInjections() const;

  // Tick thread: removes and returns the injections whose time is up.
  std::vector<InjectionRecord> Expire(absl::Time now);
  // Tick thread: field indexes that must be read this tick whatever the schedule says (active
  // injections, counter holds, injections that just ended), added to *fields.
  void ForcedFields(std::set<size_t>* fields);
  // Tick thread: turns the backend's reading of (gpu, field_index) into what is published.
  void Apply(uint32_t gpu, size_t field_index, FieldValue* value);
  // Whether Apply() could change anything (an injection or a counter hold exists). Checked once
  // per tick so that a tick without injections takes no lock per value.
  bool Empty() const;

 private:
  // A GPU's field (port empty) or a NIC port's (gpu and field_index 0).
  struct Key {
    uint32_t gpu = 0;
    size_t field_index = 0;
    std::string port;
    std::string port_field;
    auto operator<=>(const Key&) const = default;
  };
  // A record begun at `now` for `requested` (the default where 0), checked against the limits;
  // the caller fills in what is injected.
  absl::StatusOr<InjectionRecord> Start(absl::Duration requested, const Principal& principal,
                                        absl::Time now, const std::string& scenario_id,
                                        bool allow_actions) const;
  // Records `record` under `key` with a new id, superseding what is there; ResourceExhausted at
  // the limit.
  absl::StatusOr<InjectionRecord> Insert(const Key& key, InjectionRecord record,
                                         std::optional<InjectionRecord>* superseded);
  // Removes `it` from active_, noting that a GPU field's real values must be read again.
  InjectionRecord EraseLocked(std::map<Key, InjectionRecord>::iterator* it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Removes and returns the active injections `match` selects.
  std::vector<InjectionRecord> ClearIf(const std::function<bool(const InjectionRecord&)>& match);

  std::shared_ptr<const FieldLayout> layout_;
  const uint32_t gpu_count_;
  const InjectionLimits limits_;

  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<Key, InjectionRecord> active_ ABSL_GUARDED_BY(mutex_);
  // Cumulative GPU fields, by (gpu, field index): the last value published while injected; kept
  // until the real counter reaches it.
  std::map<std::pair<uint32_t, size_t>, int64_t> floors_ ABSL_GUARDED_BY(mutex_);
  std::set<size_t> ended_ ABSL_GUARDED_BY(mutex_);  // read once more so real values return now
};

}  // namespace vigil
