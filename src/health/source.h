// A health source: something beside the GPUs' fields that the engine reads on its tick and that
// judges itself into findings — about the GPUs (the NIC ports of network/: the `network` system)
// or about the node (the NVSwitches' SXids of nvswitch/: the node's `nvswitch` system). The engine
// calls Judge() on its tick thread, outside its locks, and hands the report to the evaluator,
// which turns the findings into incidents like the DCGM rules' conditions (the same onsets,
// counts, expiry, persistence of FAILs and transitions). The report is level-triggered — what
// holds now, all of it; a finding no longer reported stops holding — but for occurrences (an
// SXid): an event at a time, reported once, counted as an onset each time.
//
// Threading: Judge() and SetPortInjections() are called by one thread at a time (the tick);
// implementations need no lock for what only they touch. NicPorts(), CheckPortInjection(), OnSxid()
// and Cleared() are called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "backend/backend.h"
#include "fields/health_systems.h"
#include "fields/nic_port_entity.h"
#include "health/policy.h"

namespace vigil {

// One condition that holds now (or one occurrence), about the GPUs it names or the node.
struct SourceFinding {
  // Engine GPU indexes, one incident per GPU; unused for a node-level system's finding (one
  // incident, the node's).
  std::vector<uint32_t> gpus;
  HealthStatus status = HealthStatus::kWarn;
  std::string key;      // identity for de-duplication, per GPU: "network.state.mlx5_0/1"
  std::string code;     // a DCGM_FR_* name, or the source's own (VIGIL_FR_NET_*)
  std::string message;  // what happened, with the numbers
  std::string action;   // what to do
  RecommendedAction recommended = RecommendedAction::kInspect;
  // Sticky: a FAIL that stays, once the condition stops holding, until a reboot or an operator's
  // clear (as a DCGM rule's FAIL). Not sticky: it ends with the condition (a port that came back
  // for its recovery window), as a WARN always does.
  bool sticky = true;
  // A WARN (or a FAIL not sticky) lasts this long after the condition stopped holding.
  absl::Duration expire_after = absl::ZeroDuration();
  bool injected = false;
  // An occurrence (an SXid read from the kernel log) at this time, not a condition that holds:
  // reported in one report only, each one an onset. One that happened before the last operator
  // clear of its system is not raised again (a kernel log replayed after its replay state was
  // lost brings old lines back).
  std::optional<absl::Time> occurred;
  // The kernel-log record it was read from: the incident keeps it (persisted with a FAIL), so a
  // restart that reads the log again finds it counted (HealthEvaluator::CountsRecord).
  std::optional<LogPosition> log_position;
};

struct SourceReport {
  HealthSystem system = HealthSystem::kNetwork;  // from_source in the table; every finding's
  std::vector<SourceFinding> findings;
  // Per GPU index, why the system cannot be judged for it now ("" where it can, or where nothing
  // of the source concerns the GPU); shorter than the GPU count means "" for the rest. For a
  // node-level system, index 0 is the node's (empty: it can be judged).
  std::vector<std::string> unknown;
};

// An operator's injection into a NIC port's field (a drill of the network path): what the source's
// readings of that field become while it is active. The engine keeps them (inject/injection.h:
// audited, expired, cleared with the others) and hands the active ones to its sources.
struct PortFieldInjection {
  std::string id;     // "inj-12"
  std::string port;   // "mlx5_3/1", as the port is named
  std::string field;  // "state", "phys_state", "rate" or a counter's file name ("link_downed")
  std::optional<double> value;  // replaces the reading (exactly one of value and add)
  std::optional<int64_t> add;   // raises a counter on top of the reading, which it keeps following

  bool operator==(const PortFieldInjection&) const = default;
};

class HealthSource {
 public:
  virtual ~HealthSource() = default;
  // The systems it judges (each with from_source set; at most one of them node-level and one per
  // GPU — network/ judges each GPU's `network` and the node's `nics`).
  virtual std::vector<HealthSystem> systems() const = 0;
  // Tick thread: reads what is due at `now` and says what holds, one report per system. May do
  // I/O (sysfs reads); called with no engine lock held.
  virtual std::vector<SourceReport> Judge(absl::Time now) = 0;
  // The NIC ports it reads, as discovery shows them (with their state as last read). Thread-safe.
  virtual std::vector<NicPortEntity> NicPorts() const { return {}; }
  // Whether `injection` names one of this source's NIC ports and a change its field can take:
  // OK; NotFound where the source has no such port (the engine asks the next); InvalidArgument
  // saying what is wrong and what the field takes. Thread-safe.
  virtual absl::Status CheckPortInjection(const PortFieldInjection& injection) const {
    return absl::NotFoundError("no NIC port " + injection.port);
  }
  // Tick thread, before each Judge(): the port injections active now, all of them (often none).
  // Each applies from that Judge() on; one no longer given has ended.
  virtual void SetPortInjections(const std::vector<PortFieldInjection>& injections) {
    (void)injections;
  }
  // An NVSwitch error the engine was handed (from the kernel log): a source that judges SXids
  // keeps it for its next Judge() — or returns false where its incident already counts the SXid's
  // kernel-log record (read again after a restart), and the engine drops it. Thread-safe; must not
  // block.
  virtual bool OnSxid(const SxidEvent& sxid) {
    (void)sxid;
    return true;
  }
  // An operator cleared one of the source's systems at `at` — of one GPU, or (nullopt) of the
  // node: the source's count rules start again from there. Also called at start with the
  // clears a previous run persisted. Thread-safe.
  virtual void Cleared(std::optional<uint32_t> gpu, absl::Time at) {
    (void)gpu;
    (void)at;
  }
};

}  // namespace vigil
