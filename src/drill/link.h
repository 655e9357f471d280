// One link of the alerting chain as a drill sees it — the engine's verdict, the exporter, the
// health check, the node's condition and taint, a Prometheus alert, Alertmanager — behind one
// interface, so the drill runs every link the same way and tests give it fakes.
//
// Contract: Preflight() before anything is injected says what is wrong with the link (it does
// not answer, follows another node's engine, already shows a fault) in one line that says what to
// fix. Look() says whether the link shows what is wanted now — the fault, or on the way back its
// absence — with the engine (instance_id, seq) it shows, where it says. A failed Look() (the link
// does not answer) is not a verdict: the drill looks again until the stage's deadline.
// Thread-safety: each Link is used by one thread (the drill's).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drill/plan.h"
#include "vigil/v1/engine.pb.h"

namespace vigil::drill {

// What the drill is about: this node's engine and the GPU it follows.
struct Target {
  std::string node;         // the engine's node
  std::string instance_id;  // the engine's instance
  uint32_t gpu = 0;
  std::string uuid;
  std::optional<uint32_t> xid;  // an XID drill's code: the exporter's XID series shows it
  // The GPU's status before the injection (PASS or WARN), and the one the fault gave it (set
  // once the engine shows it; UNSPECIFIED before).
  v1::HealthStatus baseline = v1::HEALTH_STATUS_PASS;
  v1::HealthStatus fault = v1::HEALTH_STATUS_UNSPECIFIED;
};

enum class Want : uint8_t { kFault, kRecovered };

// When the drill injected (or cleaned up): the drill's clock, and the engine's seq just before.
struct Mark {
  absl::Time time;
  uint64_t seq = 0;
};

struct Observation {
  bool shown = false;       // what is wanted shows here now
  std::string instance_id;  // the engine the link follows ("" where it does not say)
  std::string node;         // that engine's node ("" where it does not say)
  uint64_t seq = 0;         // the engine tick it shows (0 where it does not say)
  // The GPU's status as the link shows it (UNSPECIFIED where it does not say in those terms).
  v1::HealthStatus status = v1::HEALTH_STATUS_UNSPECIFIED;
  std::string detail;  // what it shows, for the report
  // The link shows something that waiting cannot mend (an action taken that the drill did not
  // allow): the stage fails at once, with `detail`.
  bool failed = false;
  // The stage cannot prove anything in this drill (a WARN does not taint; the node was tainted
  // before it): SKIP, with `detail`.
  bool not_applicable = false;
  // When the engine computed what it shows (the engine's own verdict time); unset: when seen.
  std::optional<absl::Time> at;
};

class Link {
 public:
  virtual ~Link() = default;
  virtual Stage stage() const = 0;
  // Names the link in messages: "the exporter at http://10.0.0.7:9400".
  virtual std::string name() const = 0;
  virtual absl::Status Preflight(const Target& target, bool force) = 0;
  // `since`: the injection (or the cleanup) — links that keep a history answer from then on.
  virtual absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark& since) = 0;
};

// "the exporter at URL follows engine ID of node N, not this node's engine (ID of node M)", or
// OK when `instance_id` is empty (the link does not say) or the target's.
absl::Status CheckFollows(const std::string& link_name, const std::string& instance_id,
                          const std::string& node, const Target& target);

// Whether a GPU status (HealthStatusNumber: 0, 10, 20; -1 unknown) is back: known, and no worse
// than before the drill (a real warning that ended meanwhile is back too).
bool IsBack(int status, const Target& target);

}  // namespace vigil::drill
